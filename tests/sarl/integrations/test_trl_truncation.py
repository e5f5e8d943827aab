"""The TRL adapter tells rewards which completions were truncated, with TRL's own rule, and
``tag_maxflow`` masks them (tagged-reasoning A.7); the flags agree with TRL's clipped ratio."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from sarl.integrations.trl import (
    TRLRewardFunc,
    bind_trainer,
    make_trl_reward,
    trainer_stop_token_ids,
    truncated,
)
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.tagged.maxflow import TagMaxFlowReward, TagMaxFlowSettings

EOS, PAD = 1, 0


class _Settings(BaseModel):
    pass


class FlagReward(Reward):
    """Scores 1 and records what the adapter put in ``Sample.extra``."""

    name = "flags"
    Settings = _Settings
    masks_truncated: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__(_Settings())
        self.samples: list[Sample] = []

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        self.samples += [s for g in groups for s in g]
        return [[RewardOutput(1.0) for _ in g] for g in groups]


@pytest.mark.parametrize(
    ("ids", "expected"),
    [([5, 6, EOS], False), ([5, 6, 7], True), ([PAD], False), ([7, EOS, 8], True), ([], False)],
)
def test_trl_rule_last_token_neither_eos_nor_pad(ids: list[int], expected: bool) -> None:
    assert truncated(ids, frozenset({EOS, PAD})) is expected


def test_the_adapter_puts_the_flag_in_extra() -> None:
    reward = FlagReward()
    func = TRLRewardFunc(reward, stop_token_ids=[EOS, PAD])
    func(
        prompts=["p", "p", "q"],
        completions=["a", "b", "c"],
        completion_ids=[[5, EOS], [5, 6], [5, PAD]],
        level=["x", "y", "z"],
    )
    assert [s.extra["truncated"] for s in reward.samples] == [False, True, False]
    assert [s.extra["level"] for s in reward.samples] == ["x", "y", "z"]


def test_unbound_stop_ids_warn_once_for_a_masking_reward(caplog: pytest.LogCaptureFixture) -> None:
    reward = FlagReward()
    func = make_trl_reward(reward=reward)
    with caplog.at_level(logging.WARNING, logger="sarl.integrations.trl"):
        for _ in range(2):
            func(prompts=["p"], completions=["a"], completion_ids=[[5, 6]])
    assert "truncated" not in reward.samples[0].extra
    warnings = [r for r in caplog.records if "bind_trainer" in r.getMessage()]
    assert len(warnings) == 1 and "stop token ids are not bound" in warnings[0].getMessage()


def tokenizer_like(eos: int | None, pad: int | None) -> SimpleNamespace:
    return SimpleNamespace(eos_token_id=eos, pad_token_id=pad)


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        (SimpleNamespace(processing_class=tokenizer_like(2, 0), eos_token_ids=[2, 9]), {0, 2, 9}),
        (SimpleNamespace(processing_class=tokenizer_like(2, None)), {2}),  # no eos_token_ids
        (  # a processor wraps the tokenizer
            SimpleNamespace(processing_class=SimpleNamespace(tokenizer=tokenizer_like(3, 4))),
            {3, 4},
        ),
    ],
)
def test_stop_ids_are_the_trainers_eos_and_pad(trainer: Any, expected: set[int]) -> None:
    assert trainer_stop_token_ids(trainer) == expected


def test_bind_trainer_sets_the_stop_ids_of_every_trl_function() -> None:
    funcs = [make_trl_reward(reward=FlagReward()), make_trl_reward(reward=FlagReward())]
    trainer = SimpleNamespace(processing_class=tokenizer_like(EOS, PAD), eos_token_ids=[EOS])
    bind_trainer([*funcs, lambda **_: []], trainer)  # plain functions are skipped
    assert all(f.stop_token_ids == {EOS, PAD} for f in funcs)


def test_tag_maxflow_masks_what_the_adapter_flags() -> None:
    # No tagged step: an untruncated completion scores 0 without the model; a truncated one is
    # masked (NaN -> None: TRL leaves this reward out for it).
    reward = TagMaxFlowReward(TagMaxFlowSettings(model="never-loaded"))
    func = TRLRewardFunc(reward, stop_token_ids=[EOS, PAD])
    scores = func(
        prompts=["p", "p"], completions=["done", "cut"], completion_ids=[[5, EOS], [5, 6]]
    )
    assert scores == [0.0, None]
    out = reward.score_samples([Sample("cut", extra={"truncated": True})])[0]
    assert math.isnan(out.score) and out.components["truncated"] == 1.0


# --- against a real GRPO trainer ----------------------------------------------------------------


@pytest.mark.slow  # ~10 s, mostly importing TRL; still in the default suite
@pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning")
def test_flags_match_trls_clipped_ratio_in_training(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.sarl.integrations.test_trl import tiny_qwen3, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    reward = FlagReward()
    func = make_trl_reward(reward=reward)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=4,  # short: some completions end with <eos>, others are cut
        max_steps=2,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=0,
        mask_truncated_completions=True,
        generation_kwargs={"suppress_tokens": [0, 2]},  # no <pad>/<unk>; <eos> allowed
    )
    trainer = GRPOTrainer(
        model=tiny_qwen3(len(tokenizer)),
        reward_funcs=[func],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a b", "c | a"] * 8}),
        processing_class=tokenizer,
    )
    bind_trainer([func], trainer)
    assert func.stop_token_ids == {tokenizer.eos_token_id, tokenizer.pad_token_id}
    trainer.train()

    flags = [bool(s.extra["truncated"]) for s in reward.samples]
    assert len(flags) == 2 * 16 and 0 < sum(flags) < len(flags)
    logged = [h["completions/clipped_ratio"] for h in trainer.state.log_history if "loss" in h]
    per_step = [sum(flags[i : i + 16]) / 16 for i in (0, 16)]
    assert logged == pytest.approx(per_step)
