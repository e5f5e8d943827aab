"""Vote sets on TRL: a group reward votes over the trained group plus extra rollouts drawn with the
trainer's own generation, and TRL trains on the trained group only (sarl.integrations.trl_votes).

The majority labels are checked against TTRL's reference (tests/sarl/rewards/baselines/
test_ttrl.py, REFERENCE_VOTE_SETS: outputs of PRIME-RL/TTRL 3e2cc93's `test_time_train_metrics`,
whose trainer keeps the first n_samples_per_prompt of the n_votes_per_prompt responses)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sarl.integrations.trl import TRLRewardFunc, bind_trainer, make_trl_reward
from sarl.integrations.trl_votes import VOTE_ONLY, trainer_vote_drawer, vote_sets
from sarl.rewards.base import RewardOutput, Sample
from sarl.rewards.baselines.ttrl import TTRLReward
from sarl.rewards.registry import create_reward
from tests.sarl.integrations.test_trl import tiny_qwen3
from tests.sarl.rewards.baselines.test_ttrl import REFERENCE_VOTE_SETS, TRAINED


def text(answer: str) -> str:
    return f"Let us compute. The answer is \\boxed{{{answer}}}."


class Drawer:
    """Stands for the trainer's generation: the given texts per prompt, recording the calls."""

    def __init__(self, texts: dict[str, list[str]]) -> None:
        self.texts = texts
        self.calls: list[tuple[list[Any], int]] = []

    def __call__(self, prompts: Sequence[Any], n: int) -> list[list[str]]:
        self.calls.append((list(prompts), n))
        return [self.texts[p][:n] for p in prompts]


class Recording(TTRLReward):
    """TTRL, recording the groups it scores."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(TTRLReward.Settings(**settings))
        self.groups: list[list[Sample]] = []

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        self.groups += [list(g) for g in groups]
        return super().score_groups(groups)


@pytest.mark.parametrize("case", sorted(REFERENCE_VOTE_SETS))
def test_trained_scores_follow_the_vote_of_the_whole_set(case: str) -> None:
    answers, rewards, ratio = REFERENCE_VOTE_SETS[case]
    reward = Recording(votes_per_prompt=len(answers), tie_break="first")
    func = make_trl_reward(reward=reward, num_generations=TRAINED)
    func.draw_votes = drawer = Drawer({"q": [text(a) for a in answers[TRAINED:]]})
    logged: dict[str, float] = {}
    scores = func(
        prompts=["q"] * TRAINED,
        completions=[text(a) for a in answers[:TRAINED]],
        ground_truth=["x"] * TRAINED,
        log_metric=logged.__setitem__,
    )
    assert scores == rewards[:TRAINED]  # TRL gets the trained group's scores only
    assert drawer.calls == [(["q"], len(answers) - TRAINED)]
    (group,) = reward.groups
    assert [s.extra.get(VOTE_ONLY, False) for s in group] == [False] * 4 + [True] * 4
    assert {s.ground_truth for s in group} == {"x"}
    assert logged["ttrl/agrees"] == sum(rewards[:TRAINED]) / TRAINED  # means of the trained
    assert logged["ttrl/majority_ratio"] == ratio


def test_one_draw_per_batch_and_each_prompt_block_gets_its_votes() -> None:
    def draw(prompts: Sequence[Any], n: int) -> list[list[str]]:
        return [[f"{p}{i}" for i in range(n)] for p in prompts]

    groups = [
        [Sample("a0"), Sample("a1")],
        [Sample("b0"), Sample("b1"), Sample("b2"), Sample("b3")],
    ]
    prompts = ["a", "a", "b", "b", "b", "b"]  # b: two dataset rows with one prompt
    out = vote_sets(draw, prompts, [(0, 2), (2, 6)], groups, num_generations=2, extra=3)
    assert [s.response for s in out[0]] == ["a0", "a1", "a0", "a1", "a2"]
    assert [s.response for s in out[1]][4:] == ["b0", "b1", "b2", "b0", "b1", "b2"]


def test_a_vote_set_needs_the_group_size_and_a_bound_trainer() -> None:
    reward = create_reward("ttrl", {"votes_per_prompt": 8})
    with pytest.raises(ValueError, match="pass num_generations"):
        make_trl_reward(reward=reward)
    func = make_trl_reward(reward=reward, num_generations=4)
    with pytest.raises(ValueError, match="call sarl.integrations.trl.bind_trainer"):
        func(prompts=["q"] * 4, completions=["a"] * 4)
    within = make_trl_reward("ttrl", {"votes_per_prompt": 4}, num_generations=4)
    assert within.extra_votes == 0 and within(prompts=["q"] * 4, completions=["a"] * 4)


def test_a_trainer_with_tools_is_refused() -> None:
    trainer = SimpleNamespace(tools=[print], _generate_single_turn=lambda *a: None)
    with pytest.raises(ValueError, match="votes_per_prompt: the trainer has tools"):
        trainer_vote_drawer(trainer)


# --- a tiny model trained through TRL ------------------------------------------------------------

WORDS = ("a", "\\boxed{1}", "\\boxed{2}", "|")  # random completions answer 1 or 2, or nothing
SPECIALS = ("<pad>", "<eos>", "<unk>")


def boxed_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIALS + WORDS)}, "<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


@pytest.mark.slow  # ~20 s, mostly importing TRL; still in the default suite
@pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning")
@pytest.mark.parametrize("algorithm", ["grpo", "rloo"])
def test_trl_trains_on_the_group_while_the_vote_sees_the_vote_set(
    algorithm: str, tmp_path: Path
) -> None:
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset

    from sarl.runner.trl_config import trainer_classes

    config_cls, trainer_cls = trainer_classes(algorithm)
    tokenizer = boxed_tokenizer()
    model = tiny_qwen3(len(tokenizer))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    reward = Recording(votes_per_prompt=12)
    func = make_trl_reward(reward=reward, num_generations=4)
    batches: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> list[float | None]:
        batches.append(len(kwargs["completions"]))
        return func(*args, **kwargs)

    counted.__name__ = func.__name__
    args = config_cls(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,  # 2 prompts x 4 trained completions
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=0,
        generation_kwargs={"suppress_tokens": [0, 2]},  # no <pad>/<unk>
    )
    trainer = trainer_cls(
        model=model,
        reward_funcs=[counted],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a", "a |", "| a", "|", "a a", "| |"]}),
        processing_class=tokenizer,
    )
    bind_trainer([func], trainer)
    trainer.train()

    assert isinstance(func, TRLRewardFunc) and trainer.num_generations == 4
    assert batches == [8, 8]  # TRL scores, and trains on, 2 prompts x 4 completions a step
    assert [len(g) for g in reward.groups] == [12] * 4  # each vote: 4 trained + 8 drawn
    assert all(sum(s.extra.get(VOTE_ONLY, False) for s in g) == 8 for g in reward.groups)
    drawn = [s.response for g in reward.groups for s in g if s.extra.get(VOTE_ONLY)]
    assert any("\\boxed{" in r for r in drawn)  # real completions of the policy
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())
