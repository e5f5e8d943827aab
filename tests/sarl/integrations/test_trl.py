"""The TRL adapter: scores, text extraction, groups and metrics of ``sarl.integrations.trl``, and a
few GRPO steps of a tiny random model trained on the structure reward through it.

Unit tests use a deterministic hash embedder (identical texts -> identical unit vectors) so they
need neither torch nor a model; only the training test imports TRL.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import BaseModel

from sarl.integrations.trl import TRLRewardFunc, Turn, group_spans, make_trl_reward
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import RewardConfigError
from sarl.rewards.structure import StructureScorer, score_labels
from sarl.rewards.structure.reward import COMPONENT_KEYS, StructureReward, StructureRewardSettings

DIM = 16
SETTINGS = StructureRewardSettings(delimiter="|", missing_think="whole_response", workers=1)


class HashEmbedder:
    """Unit vector seeded by the SHA-256 of the text: deterministic across runs and processes."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        rows = np.zeros((len(texts), DIM), dtype=np.float64)  # (n, dim)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            rows[i] = np.random.default_rng(seed).standard_normal(DIM)
        unit: npt.NDArray[np.float32] = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(
            np.float32
        )
        return unit


class FailingEmbedder:
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise RuntimeError("embedding backend down")


class MetricLog:
    """Stands in for TRL's ``log_metric`` kwarg."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def __call__(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)


class _GroupSettings(BaseModel):
    pass


class GroupSizeReward(Reward):
    """A group reward that scores each sample with its group's size and records its input."""

    name = "group_size"
    Settings = _GroupSettings
    needs_group: ClassVar[bool] = True

    def __init__(self, nan_for: str | None = None) -> None:
        super().__init__(_GroupSettings())
        self.nan_for = nan_for
        self.batches: list[list[list[Sample]]] = []

    @property
    def component_keys(self) -> tuple[str, ...]:
        return ("size",)

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        self.batches.append([list(g) for g in groups])
        return [
            [
                RewardOutput(
                    score=math.nan if s.response == self.nan_for else float(len(g)),
                    components={"size": float(len(g))},
                )
                for s in g
            ]
            for g in groups
        ]


def structure_func(embedder: Any = None) -> TRLRewardFunc:
    return make_trl_reward(reward=StructureReward(SETTINGS, embedder=embedder or HashEmbedder()))


def expected_scores(responses: Sequence[str]) -> list[float]:
    scorer = StructureScorer(SETTINGS.scoring_config(), HashEmbedder(), workers=1)
    return [r.score for r in scorer.score_batch(responses)]


PLAIN = ["A|B|A|B", "x|y|z|x|y|z|w", "only one step", "p|q|r|p|s|q|t|r|p"]


def test_name_is_the_trl_metric_name() -> None:
    assert structure_func().__name__ == "sarl_structure"


def test_plain_completions_score_like_the_scorer_in_order() -> None:
    func = structure_func()
    prompts = ["P"] * len(PLAIN)
    assert func(prompts=prompts, completions=PLAIN) == pytest.approx(expected_scores(PLAIN))
    reversed_plain = PLAIN[::-1]
    assert func(prompts=prompts, completions=reversed_plain) == pytest.approx(
        expected_scores(reversed_plain)
    )


def test_alternating_two_step_kinds_score_as_a_two_node_map() -> None:
    # Two distinct step texts -> two clusters (k = round(sqrt(4)) = 2), labels 0,1,0,1.
    (score,) = structure_func()(prompts=["P"], completions=["A|B|A|B"])
    assert score == pytest.approx(score_labels([0, 1, 0, 1], SETTINGS.scoring_config()).score)


@pytest.mark.parametrize(
    ("completion", "as_text"),
    [
        ([{"role": "assistant", "content": "A|B|A|B"}], "A|B|A|B"),
        (
            [{"role": "assistant", "reasoning_content": "A|B|A|B", "content": "x|y"}],
            "<think>A|B|A|B</think>x|y",
        ),
        ([{"role": "assistant", "thinking": "p|q|p", "content": ""}], "<think>p|q|p</think>"),
        (
            [
                {"role": "assistant", "content": "u|v", "tool_calls": [{"type": "function"}]},
                {"role": "tool", "name": "f", "content": "w|w|w"},
                {"role": "assistant", "content": "p|q|r|p|s|q|t|r|p"},
            ],
            "p|q|r|p|s|q|t|r|p",
        ),
        ([{"role": "assistant", "content": [{"type": "text", "text": "x|y|z|x"}]}], "x|y|z|x"),
    ],
)
def test_conversational_completion_scores_its_last_assistant_message(
    completion: list[dict[str, Any]], as_text: str
) -> None:
    prompt = [{"role": "user", "content": "Q"}]
    (score,) = structure_func()(prompts=[prompt], completions=[completion])
    assert score == pytest.approx(expected_scores([as_text])[0])


def test_conversational_completion_without_assistant_message_raises() -> None:
    with pytest.raises(ValueError, match="no assistant message"):
        structure_func()(prompts=["P"], completions=[[{"role": "tool", "content": "x"}]])


def test_whole_batch_is_embedded_in_one_call() -> None:
    embedder = HashEmbedder()
    structure_func(embedder)(prompts=["P1", "P1", "P2", "P2"], completions=PLAIN)
    assert len(embedder.calls) == 1


def test_log_metric_receives_nan_skipping_component_means() -> None:
    log = MetricLog()
    structure_func()(prompts=["P"] * len(PLAIN), completions=PLAIN, log_metric=log)
    scorer = StructureScorer(SETTINGS.scoring_config(), HashEmbedder(), workers=1)
    components = [r.components() for r in scorer.score_batch(PLAIN)]
    assert set(log.values) == {f"structure/{k}" for k in COMPONENT_KEYS}
    for key in COMPONENT_KEYS:
        expected = float(np.nanmean([c[key] for c in components]))
        assert log.values[f"structure/{key}"] == [pytest.approx(expected)]
    # "only one step" has no path length; its NaN is skipped, not averaged in.
    assert not math.isnan(log.values["structure/path_length"][0])


def test_all_nan_component_is_not_logged() -> None:
    log = MetricLog()
    structure_func()(prompts=["P", "P"], completions=["one step", "another"], log_metric=log)
    assert "structure/path_length" not in log.values
    assert log.values["structure/degenerate"] == [1.0]


def test_embedder_failure_propagates() -> None:
    with pytest.raises(RuntimeError, match="embedding backend down"):
        structure_func(FailingEmbedder())(prompts=["P"], completions=["A|B"])


def test_groups_are_runs_of_equal_consecutive_prompts() -> None:
    reward = GroupSizeReward()
    func = make_trl_reward(reward=reward)
    prompts: list[Turn] = ["a", "a", "a", "b", "b", [{"role": "user", "content": "c"}]]
    scores = func(prompts=prompts, completions=["r"] * 6)
    assert scores == [3.0, 3.0, 3.0, 2.0, 2.0, 1.0]
    (batch,) = reward.batches  # one score_groups call per TRL batch
    assert [[s.prompt for s in g] for g in batch] == [["a"] * 3, ["b"] * 2, ["c"]]


@pytest.mark.parametrize(
    ("prompts", "num_generations", "spans"),
    [
        ([], None, []),
        (["a", "a", "b", "b"], None, [(0, 2), (2, 4)]),
        (["a", "a", "b", "b"], 2, [(0, 2), (2, 4)]),
        (["a", "a", "a", "a"], 2, [(0, 4)]),  # two rows with one prompt: still siblings
        (["a", "b", "a"], None, [(0, 1), (1, 2), (2, 3)]),
    ],
)
def test_group_spans(
    prompts: list[str], num_generations: int | None, spans: list[tuple[int, int]]
) -> None:
    assert group_spans(prompts, num_generations) == spans


@pytest.mark.parametrize("prompts", [["a", "a", "b"], ["a", "b", "b", "b"], ["a", "a", "a"]])
def test_cut_groups_are_rejected_when_num_generations_is_set(prompts: list[str]) -> None:
    func = make_trl_reward(reward=GroupSizeReward(), num_generations=2)
    with pytest.raises(ValueError, match="not whole groups"):
        func(prompts=prompts, completions=["r"] * len(prompts))


def test_dataset_columns_reach_the_samples_and_trl_controls_do_not() -> None:
    reward = GroupSizeReward()
    make_trl_reward(reward=reward)(
        prompts=["a", "a"],
        completions=["r1", "r2"],
        completion_ids=[[1], [2]],
        ground_truth=[42, None],
        level=["easy", "hard"],
        trainer_state=object(),
        log_extra=lambda column, values: None,
        environments=[None, None],
    )
    first, second = reward.batches[0][0]
    assert (first.ground_truth, second.ground_truth) == ("42", None)
    assert (dict(first.extra), dict(second.extra)) == ({"level": "easy"}, {"level": "hard"})


def test_nan_score_is_none_for_trl() -> None:
    func = make_trl_reward(reward=GroupSizeReward(nan_for="skip"))
    assert func(prompts=["a", "a"], completions=["skip", "keep"]) == [None, 2.0]


def test_make_trl_reward_builds_by_name_and_checks_arguments() -> None:
    func = make_trl_reward("structure", {"delimiter": "|"})
    assert isinstance(func.reward, StructureReward)
    with pytest.raises(ValueError, match="settings"):
        make_trl_reward(settings={"delimiter": "|"}, reward=GroupSizeReward())
    with pytest.raises(RewardConfigError, match="unknown name"):
        make_trl_reward("no_such_reward")
    with pytest.raises(ValueError, match="num_generations"):
        make_trl_reward(reward=GroupSizeReward(), num_generations=0)


# --- training ---------------------------------------------------------------------------------

# Step delimiter "|" is one of four words, so random samples have several steps and their
# rewards differ within a group (non-zero advantages).
WORDS = ("a", "b", "c", "|")
SPECIALS = ("<pad>", "<eos>", "<unk>")


def tiny_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()  # joins word-level tokens with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def tiny_qwen3(vocab_size: int) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config)


@pytest.mark.slow  # ~10 s, mostly importing TRL; still in the default suite
# TRL 1.16 sets transformers 5's deprecated `gradient_checkpointing` alias; not ours to fix.
@pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning")
def test_grpo_trains_a_tiny_model_on_the_structure_reward(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = tiny_tokenizer()
    model = tiny_qwen3(len(tokenizer))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    func = structure_func()
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> list[float | None]:
        calls.append(len(kwargs["completions"]))
        return func(*args, **kwargs)

    counted.__name__ = func.__name__
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=24,
        max_steps=3,
        learning_rate=1e-2,
        beta=0.0,  # no reference model: faster, and the loss is the policy term only
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=0,
        # Only words: no <pad>/<unk>, and no early <eos>, so every completion has several steps.
        generation_kwargs={"suppress_tokens": [0, 1, 2]},
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[counted],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a b", "c | a", "b c a", "| b"] * 4}),
        processing_class=tokenizer,
    )
    trainer.train()

    assert calls == [8, 8, 8]
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())
    logs = [h for h in trainer.state.log_history if "rewards/sarl_structure/mean" in h]
    assert len(logs) == 3
    assert all("structure/clustering" in h and "structure/num_steps" in h for h in logs)
    assert any(h["reward_std"] > 0 for h in logs)


def test_log_metric_receives_reward_validity_per_reward() -> None:
    """Every reward function logs validity/<reward>/... when the batch has ground truths: here a
    format-like reward (response length) against boxed-answer correctness, two prompts of 3."""
    log = MetricLog()
    func = make_trl_reward("ground_truth", {})
    completions = ["\\boxed{4}", "\\boxed{5}", "none", "\\boxed{7}", "\\boxed{7}", "\\boxed{1}"]
    func(
        prompts=["P1"] * 3 + ["P2"] * 3,
        completions=completions,
        ground_truth=["4", "4", "4", "7", "7", "7"],
        log_metric=log,
    )
    # ground_truth scores are correctness itself: AUROC 1, every within-group pair agrees.
    assert log.values["validity/ground_truth/auroc"] == [1.0]
    assert log.values["validity/ground_truth/pair_agreement"] == [1.0]
    assert log.values["validity/ground_truth/pair_ties"] == [0.0]
    # the trivial predictors beside it: P1's pairs (4 vs 5, 4 vs none) -> "has an answer"
    # orders the unanswered one right and ties the other; P2 (7, 7 vs 1) ties both pairs
    assert log.values["validity/trivial.has_answer/pair_agreement"] == [pytest.approx(1 / 4)]
    assert log.values["validity/trivial.has_answer/pair_ties"] == [pytest.approx(3 / 4)]
    assert "validity/trivial.format_valid/auroc" in log.values
    # and the counts behind them: 2 prompts, both with pairs, 2 + 2 pairs
    assert log.values["validity_counts/prompts"] == [2.0]
    assert log.values["validity_counts/prompts_with_pairs"] == [2.0]
    assert log.values["validity_counts/pairs"] == [4.0]

    log = MetricLog()
    group = GroupSizeReward()  # scores every sample with its group size: ties within groups
    make_trl_reward(reward=group)(
        prompts=["P1"] * 3 + ["P2"] * 2,
        completions=completions[:5],
        ground_truth=["4", "4", "4", "7", "7"],
        log_metric=log,
    )
    # P1: correct {3} vs incorrect {3, 3} -> 2 tied pairs; P2 has no incorrect response.
    assert log.values["validity/group_size/pair_ties"] == [1.0]
    assert log.values["validity/group_size/pair_agreement"] == [0.0]
    # batch: correct {3, 2, 2} vs incorrect {3, 3}: 2 ties and 4 losses -> (0 + 1) / 6
    assert log.values["validity/group_size/auroc"] == [pytest.approx(1 / 6)]


def test_no_validity_without_ground_truth() -> None:
    log = MetricLog()
    structure_func()(prompts=["P"] * len(PLAIN), completions=PLAIN, log_metric=log)
    assert not any(k.startswith("validity/") for k in log.values)
