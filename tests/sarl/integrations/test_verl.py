"""The verl 0.9.1 adapter: batcher, compute_score, SarlRewardManager and the Hydra overrides.

The end-to-end tests run verl's own code: configs composed from verl's ``ppo_trainer.yaml`` with
the generated overrides, ``RewardLoopWorker`` (which loads the custom function / manager the way
verl does) and ``RewardLoopManager.compute_rm_score`` (token placement, extra info), with Ray
replaced by in-process calls. The tokenizer is a character-level one built offline; rewards use a
deterministic hash embedder, so no model or network is needed. Skipped without verl (the TRL
environment).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import BaseModel

verl = pytest.importorskip("verl")

import ray  # noqa: E402  (after the skip: verl's environment only)
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop import RewardLoopManager, RewardLoopWorker  # noqa: E402
from verl.trainer.ppo.reward import (  # noqa: E402
    extract_reward,
    get_custom_reward_fn,
    resolve_reward_manager_cls,
)

import sarl.integrations.verl.compute_score as compute_score_module  # noqa: E402
from sarl.evaluation.trivial import TRIVIAL  # noqa: E402
from sarl.integrations.verl.batcher import (  # noqa: E402
    SHARED,
    GroupCollector,
    GroupIncompleteError,
    RewardBatcher,
)
from sarl.integrations.verl.compute_score import (  # noqa: E402
    FAILED_KEY,
    RewardScoringError,
    compute_score,
    compute_score_sync,
)
from sarl.integrations.verl.overrides import (  # noqa: E402
    MANAGER_OPTIONS_KEY,
    hydra_quote,
    parse_manager_options,
    parse_score_options,
    verl_reward_overrides,
)
from sarl.integrations.verl.reward_manager import (  # noqa: E402
    SarlRewardManager,
    response_truncated,
)
from sarl.integrations.verl.validity import ANSWER_CORRECT_KEY  # noqa: E402
from sarl.rewards.base import Reward, RewardOutput, Sample  # noqa: E402
from sarl.rewards.registry import RewardConfigError, register_reward  # noqa: E402
from sarl.rewards.structure.reward import (  # noqa: E402
    COMPONENT_KEYS,
    StructureReward,
    StructureRewardSettings,
)

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
COMPUTE_SCORE_FILE = compute_score_module.__file__
DIM = 16

#: The trivial predictors compute_score adds (None without a ground truth).
TRIVIAL_NONE = dict.fromkeys(TRIVIAL)


# --- rewards used by the tests ----------------------------------------------------------------


class HashEmbedder:
    """Unit vector seeded by the SHA-256 of the text; records each call's texts."""

    calls: ClassVar[list[list[str]]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        HashEmbedder.calls.append(list(texts))
        rows = np.zeros((len(texts), DIM), dtype=np.float64)  # (n, dim)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            rows[i] = np.random.default_rng(seed).standard_normal(DIM)
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


class ToyStructure(StructureReward):
    """The structure reward with the hash embedder; counts how often it is built."""

    name = "verl_test_structure"
    built: ClassVar[int] = 0

    def __init__(self, settings: StructureRewardSettings) -> None:
        super().__init__(settings, embedder=HashEmbedder())
        ToyStructure.built += 1


class _NoSettings(BaseModel):
    pass


class MajorityVote(Reward):
    """TTRL-like group reward: 1.0 when a response's last character is its group's majority."""

    name = "verl_test_majority"
    Settings = _NoSettings
    needs_group = True
    batches: ClassVar[list[list[list[Sample]]]] = []

    @property
    def component_keys(self) -> tuple[str, ...]:
        return ("group_size", "votes")

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        MajorityVote.batches.append([list(g) for g in groups])
        return [majority_outputs([s.response for s in g]) for g in groups]


def majority_outputs(responses: Sequence[str]) -> list[RewardOutput]:
    answers = [r[-1:] for r in responses]
    top = max(sorted(set(answers)), key=answers.count)
    return [
        RewardOutput(
            float(a == top), {"group_size": float(len(answers)), "votes": float(answers.count(a))}
        )
        for a in answers
    ]


class Flaky(Reward):
    """Per-sample reward: score = len(response); 'boom' raises, 'slow' takes a second."""

    name = "verl_test_flaky"
    Settings = _NoSettings

    @property
    def component_keys(self) -> tuple[str, ...]:
        return ("length",)

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        raise NotImplementedError  # only the async path is used

    async def ascore_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        texts = [s.response for g in groups for s in g]
        if any("boom" in t for t in texts):
            raise RuntimeError("scorer exploded")
        if any("slow" in t for t in texts):
            await asyncio.sleep(1.0)
        return [[RewardOutput(float(len(s.response)), {"length": 1.0}) for s in g] for g in groups]


class Recorder(Reward):
    """Per-sample reward: score = float(response); records every batch it gets."""

    name = "verl_test_recorder"
    Settings = _NoSettings

    def __init__(self, settings: BaseModel | None = None, *, fail_on: str = "", drop: bool = False):
        super().__init__(settings or _NoSettings())
        self.batches: list[list[list[str]]] = []
        self.fail_on = fail_on
        self.drop = drop

    @property
    def component_keys(self) -> tuple[str, ...]:
        return ()

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        self.batches.append([[s.response for s in g] for g in groups])
        if self.fail_on and any(s.response == self.fail_on for g in groups for s in g):
            raise RuntimeError(f"cannot score {self.fail_on}")
        out = [[RewardOutput(float(s.response)) for s in g] for g in groups]
        return out[:-1] if self.drop else out

    async def ascore_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return self.score_groups(groups)


@pytest.fixture(autouse=True)
def _registered_rewards() -> Iterator[None]:
    for cls in (ToyStructure, MajorityVote, Flaky):
        register_reward(cls)
    HashEmbedder.calls.clear()
    MajorityVote.batches.clear()
    ToyStructure.built = 0
    yield
    SHARED.close()


# --- verl plumbing: tokenizer, configs, DataProto, Ray stand-in ---------------------------------

TOY_SETTINGS = {"delimiter": "|", "workers": 1}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A character-level tokenizer saved like a model directory (verl loads it by path)."""
    return save_char_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def save_char_tokenizer(path: Path) -> Path:
    """Save a character-level tokenizer (pad, eos, unk, printable ASCII, newline) into ``path``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<eos>", "<unk>", *chars])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # characters back to text, no spaces in between
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(path)
    return path


def verl_config(overrides: Sequence[str]) -> DictConfig:
    """verl's ``ppo_trainer.yaml`` composed with ``overrides``, as ``main_ppo`` would get it."""
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def make_data(
    tokenizer: Any, prompts: Sequence[str], responses: Sequence[str], uids: Sequence[str]
) -> DataProto:
    """A verl rollout batch: left-padded prompts, right-padded responses ending in EOS."""
    prompt_ids = [tokenizer.encode(p) for p in prompts]
    response_ids = [[*tokenizer.encode(r), tokenizer.eos_token_id] for r in responses]
    p_len = max(map(len, prompt_ids))
    r_len = max(map(len, response_ids)) + 3  # trailing padding on every row
    pad = tokenizer.pad_token_id
    rows_p, rows_r, rows_m = [], [], []
    for p, r in zip(prompt_ids, response_ids, strict=True):
        rows_p.append([pad] * (p_len - len(p)) + p)
        rows_r.append(r + [pad] * (r_len - len(r)))
        rows_m.append([0] * (p_len - len(p)) + [1] * (len(p) + len(r)) + [0] * (r_len - len(r)))
    n = len(prompts)
    prompts_t, responses_t = torch.tensor(rows_p), torch.tensor(rows_r)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,  # (n, p_len)
            "responses": responses_t,  # (n, r_len)
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": torch.tensor(rows_m),  # (n, p_len + r_len)
        },
        non_tensors={
            "data_source": np.array(["toy"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": "7"} for _ in range(n)], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(n)], dtype=object),
            "uid": np.array(list(uids), dtype=object),
        },
    )


class LocalActor:
    """Stands in for a Ray actor handle: ``handle.method.remote(...)`` returns the coroutine."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> Any:
        return SimpleNamespace(remote=getattr(self._obj, name))


def run_reward_loop(
    cfg: DictConfig, data: DataProto, monkeypatch: pytest.MonkeyPatch
) -> tuple[RewardLoopWorker, DataProto]:
    """verl's reward path in-process: a ``RewardLoopWorker`` and ``compute_rm_score``."""
    loop = asyncio.new_event_loop()
    # verl's managers capture asyncio.get_event_loop() at construction and run on it.
    asyncio.set_event_loop(loop)
    try:
        worker = RewardLoopWorker(cfg)
        manager = RewardLoopManager.__new__(RewardLoopManager)  # no Ray actors
        manager.config = cfg
        manager.reward_model_manager = None
        manager.reward_loop_workers = [LocalActor(worker)]
        manager.reward_manager_cls = resolve_reward_manager_cls(cfg)
        monkeypatch.setattr(ray, "get", lambda refs: loop.run_until_complete(asyncio.gather(*refs)))
        return worker, manager.compute_rm_score(data)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def last_token_index(data: DataProto) -> torch.Tensor:
    prompt_len = data.batch["prompts"].shape[1]
    return data.batch["attention_mask"][:, prompt_len:].sum(dim=1) - 1


def assert_only_at_last_token(rm_scores: torch.Tensor, data: DataProto) -> torch.Tensor:
    """Return the per-row score after checking every other position is zero."""
    last = last_token_index(data)
    rows = torch.arange(rm_scores.shape[0])
    elsewhere = rm_scores.clone()
    elsewhere[rows, last] = 0.0
    assert torch.count_nonzero(elsewhere) == 0
    return rm_scores[rows, last]


# --- batcher ------------------------------------------------------------------------------------


def test_batcher_coalesces_concurrent_calls_in_order() -> None:
    reward = Recorder()

    async def main() -> list[RewardOutput]:
        batcher = RewardBatcher(reward, max_batch_samples=100, max_wait_s=0.05)
        return await asyncio.gather(*(batcher.score_sample(Sample(str(i))) for i in range(10)))

    outputs = asyncio.run(main())
    assert [o.score for o in outputs] == [float(i) for i in range(10)]
    assert reward.batches == [[[str(i)] for i in range(10)]]


def test_batcher_flushes_at_max_batch_samples_and_keeps_group_order() -> None:
    reward = Recorder()
    groups = [["1", "2"], ["3"], ["4", "5", "6"], ["7", "8"]]

    async def main() -> list[list[RewardOutput]]:
        batcher = RewardBatcher(reward, max_batch_samples=3, max_wait_s=10.0)
        tasks = [batcher.score_group([Sample(t) for t in g]) for g in groups]
        # The last group is flushed by drain(), long before its 10 s window ends.
        results = await asyncio.wait_for(asyncio.gather(*tasks, batcher.drain()), 1.0)
        return list(results[:-1])

    outputs = asyncio.run(main())
    assert [[o.score for o in g] for g in outputs] == [
        [1.0, 2.0],
        [3.0],
        [4.0, 5.0, 6.0],
        [7.0, 8.0],
    ]
    assert reward.batches == [[["1", "2"], ["3"]], [["4", "5", "6"]], [["7", "8"]]]


def test_batcher_errors_reach_only_the_failing_batch() -> None:
    reward = Recorder(fail_on="2")

    async def main() -> list[Any]:
        batcher = RewardBatcher(reward, max_batch_samples=2, max_wait_s=0.01)
        calls = [batcher.score_sample(Sample(t)) for t in ("1", "2", "3", "4")]
        return await asyncio.gather(*calls, return_exceptions=True)

    first, second, third, fourth = asyncio.run(main())
    assert isinstance(first, RuntimeError) and isinstance(second, RuntimeError)
    assert "cannot score 2" in str(first)
    assert (third.score, fourth.score) == (3.0, 4.0)


def test_batcher_rejects_a_wrongly_shaped_reply() -> None:
    async def main() -> None:
        await RewardBatcher(Recorder(drop=True), max_wait_s=0.0).score_sample(Sample("1"))

    with pytest.raises(RuntimeError, match="returned groups of sizes"):
        asyncio.run(main())


def test_batcher_drops_callers_cancelled_before_the_flush() -> None:
    reward = Recorder()

    async def main() -> float:
        batcher = RewardBatcher(reward, max_wait_s=0.05)
        gone = asyncio.ensure_future(batcher.score_sample(Sample("1")))
        kept = asyncio.ensure_future(batcher.score_sample(Sample("2")))
        await asyncio.sleep(0)
        gone.cancel()
        return (await kept).score

    assert asyncio.run(main()) == 2.0
    assert reward.batches == [[["2"]]]


@pytest.mark.parametrize("kwargs", [{"max_batch_samples": 0}, {"max_wait_s": -1.0}])
def test_batcher_rejects_bad_limits(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RewardBatcher(Recorder(), **kwargs)


def test_group_collector_scores_whole_groups_arriving_interleaved() -> None:
    reward = MajorityVote(_NoSettings())
    arrivals = [(f"u{g}", f"r{g}{i}{'ab'[i == 2]}") for g in range(3) for i in range(3)]
    random.Random(0).shuffle(arrivals)

    async def main() -> list[RewardOutput]:
        batcher = RewardBatcher(reward, max_wait_s=0.02)
        collector = GroupCollector(batcher, group_size=3, timeout_s=5.0)

        async def arrive(k: int, uid: str, text: str) -> RewardOutput:
            await asyncio.sleep(0.002 * k)
            return await collector.score(uid, Sample(text))

        outs = await asyncio.gather(*(arrive(k, u, t) for k, (u, t) in enumerate(arrivals)))
        assert collector.open_groups == 0
        return list(outs)

    outputs = asyncio.run(main())
    scored = [g for batch in MajorityVote.batches for g in batch]
    assert sorted(sorted(s.response for s in g) for g in scored) == [
        [f"r{g}0a", f"r{g}1a", f"r{g}2b"] for g in range(3)
    ]
    for (_, text), out in zip(arrivals, outputs, strict=True):
        assert out.score == (1.0 if text.endswith("a") else 0.0)
        assert out.components["group_size"] == 3.0


def test_group_collector_fails_an_incomplete_group() -> None:
    async def main() -> list[Any]:
        batcher = RewardBatcher(MajorityVote(_NoSettings()), max_wait_s=0.0)
        collector = GroupCollector(batcher, group_size=3, timeout_s=0.05)
        calls = [collector.score("u", Sample("a")), collector.score("u", Sample("b"))]
        return await asyncio.gather(*calls, return_exceptions=True)

    errors = asyncio.run(main())
    assert all(isinstance(e, GroupIncompleteError) for e in errors)
    assert "2 of 3 samples" in str(errors[0])
    assert MajorityVote.batches == []


def test_group_collector_bounds_scoring_time() -> None:
    async def main() -> None:
        batcher = RewardBatcher(Flaky(_NoSettings()), max_wait_s=0.0)
        collector = GroupCollector(batcher, group_size=1, timeout_s=5.0, score_timeout_s=0.05)
        await collector.score("u", Sample("slow"))

    with pytest.raises(TimeoutError, match="longer than 0.05 s"):
        asyncio.run(main())


# --- overrides ----------------------------------------------------------------------------------


def test_per_sample_overrides_land_where_verl_reads_them() -> None:
    settings = {
        "delimiter": "\n\n",
        "embedder": {"kind": "openai", "url": "http://e:8000", "model": "m"},
    }
    overrides = verl_reward_overrides("structure", settings, group=False, on_error=0.0)
    cfg = verl_config(overrides)
    fn = get_custom_reward_fn(cfg)  # verl: partial(_call_with_kwargs_async, raw_fn, reward_kwargs)
    assert fn is not None and fn.args[0] is compute_score
    options = parse_score_options(fn.args[1])
    assert (options.reward, options.on_error) == ("structure", 0.0)
    assert options.settings == {
        "embedder": {"kind": "openai", "url": "http://e:8000", "model": "m"}
    }
    assert cfg.reward.reward_manager.name == "naive"


def test_group_overrides_land_where_verl_reads_them() -> None:
    overrides = verl_reward_overrides(
        "verl_test_structure", {"delimiter": "|"}, group=True, timeout_s=5.0, group_size=4
    )
    cfg = verl_config(overrides)
    assert resolve_reward_manager_cls(cfg) is SarlRewardManager
    assert cfg.reward.num_workers == 1
    assert get_custom_reward_fn(cfg) is None
    options = parse_manager_options(
        OmegaConf.to_container(OmegaConf.select(cfg, MANAGER_OPTIONS_KEY))
    )
    assert (options.reward, options.settings, options.timeout_s) == (
        "verl_test_structure",
        {"delimiter": "|"},
        5.0,
    )
    assert options.group_size == 4


def test_legacy_top_level_key_is_ignored_by_verl() -> None:
    cfg = verl_config([f"custom_reward_function.path={COMPUTE_SCORE_FILE}"])
    assert get_custom_reward_fn(cfg) is None


TRICKY = ["a\nb", "it's", "end\\", "C:\\dir\\", "${oops}", "\\${x}", "1", "true", "a'b\\'c", ""]


def test_quoted_strings_survive_hydra_and_omegaconf() -> None:
    keys = {f"s{i}": text for i, text in enumerate(TRICKY)}
    cfg = verl_config([f"++{MANAGER_OPTIONS_KEY}.{k}={hydra_quote(v)}" for k, v in keys.items()])
    assert {k: OmegaConf.select(cfg, f"{MANAGER_OPTIONS_KEY}.{k}") for k in keys} == keys


def test_overrides_refuse_a_group_reward_on_the_per_sample_path() -> None:
    with pytest.raises(RewardConfigError, match="needs whole groups"):
        verl_reward_overrides("verl_test_majority", None, group=False)


def test_overrides_validate_settings() -> None:
    with pytest.raises(RewardConfigError, match="max_steps"):
        verl_reward_overrides("structure", {"max_steps": 0}, group=False)


# --- compute_score through verl ---------------------------------------------------------------

STRUCTURE_RESPONSES = [
    "<think>a1|b2|a1|c3|b2|d4</think>7",
    "<think>only one step</think>7",  # one node: path_length undefined
    "<think>x|y|z|x|y|w|v</think>8",
    "no think block|but steps|here",
]


@pytest.mark.parametrize("path", [COMPUTE_SCORE_FILE, "pkg://sarl.integrations.verl.compute_score"])
def test_compute_score_through_verl_reward_loop(
    path: str, tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = verl_reward_overrides("verl_test_structure", TOY_SETTINGS, group=False)
    overrides = [o for o in overrides if not o.startswith("reward.custom_reward_function.path=")]
    cfg = verl_config(
        [
            *overrides,
            f"reward.custom_reward_function.path={path}",
            # A wide batching window, so the assertion on one embedder call cannot flake.
            "++reward.custom_reward_function.reward_kwargs.max_wait_ms=200",
            f"actor_rollout_ref.model.path={tokenizer_dir}",
        ]
    )
    n = len(STRUCTURE_RESPONSES)
    data = make_data(
        _tokenizer(tokenizer_dir), ["q?"] * n, STRUCTURE_RESPONSES, [f"u{i}" for i in range(n)]
    )

    worker, out = run_reward_loop(cfg, data, monkeypatch)

    assert worker.reward_manager.is_async_reward_score  # verl awaits compute_score
    reward_tensor, extra = extract_reward(out)
    expected = ToyStructure(StructureRewardSettings(**TOY_SETTINGS)).score_samples(
        [Sample(r) for r in STRUCTURE_RESPONSES]
    )
    scores = assert_only_at_last_token(reward_tensor, data)
    assert scores.tolist() == pytest.approx([o.score for o in expected])
    assert list(extra) == ["score", *COMPONENT_KEYS, FAILED_KEY, ANSWER_CORRECT_KEY, *TRIVIAL]
    assert extra["path_length"][1] is None and extra["degenerate"][1] == 1.0
    assert list(extra[FAILED_KEY]) == [0.0] * n
    # verl's n concurrent per-sample calls became one embedder request.
    assert len(HashEmbedder.calls) == 2  # 1 here + 1 for `expected`


def _tokenizer(path: Path) -> Any:
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(path))


FLAKY = {"reward": "verl_test_flaky", "max_wait_ms": 0.0}


@pytest.mark.parametrize(
    ("response", "extra", "message"),
    [
        ("boom", {}, "scorer exploded"),
        ("slow", {"timeout_s": 0.05}, "timeout_s=0.05"),
    ],
)
def test_compute_score_raises_by_default(
    response: str, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(RewardScoringError, match=message) as info:
        asyncio.run(compute_score("toy", response, None, None, **FLAKY, **extra))
    assert "verl_test_flaky" in str(info.value) and "on_error" in str(info.value)


@pytest.mark.parametrize(("response", "extra"), [("boom", {}), ("slow", {"timeout_s": 0.05})])
def test_compute_score_on_error_scores_and_flags_failures(
    response: str, extra: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        result = asyncio.run(
            compute_score("toy", response, None, None, **FLAKY, **extra, on_error=-1)
        )
    assert result == {
        "score": -1.0,
        "length": None,
        FAILED_KEY: 1.0,
        ANSWER_CORRECT_KEY: None,
        **TRIVIAL_NONE,
    }
    assert "verl_test_flaky" in caplog.text


def test_compute_score_succeeds_with_the_same_keys() -> None:
    result = asyncio.run(compute_score("toy", "fine", None, None, **FLAKY, on_error=-1))
    assert result == {
        "score": 4.0,
        "length": 1.0,
        FAILED_KEY: 0.0,
        ANSWER_CORRECT_KEY: None,
        **TRIVIAL_NONE,
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reward": "verl_test_majority"}, "needs whole groups"),
        ({"reward": "verl_test_flaky", "timeout": 3}, "timeout"),
        ({"reward": "no_such_reward"}, "unknown name"),
        ({"reward": "verl_test_flaky", "on_error": float("nan")}, "on_error"),
    ],
)
def test_compute_score_config_errors_always_raise(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RewardConfigError, match=message):
        asyncio.run(compute_score("toy", "x", None, None, **kwargs))


def test_compute_score_sync_twin() -> None:
    assert compute_score_sync("toy", "fine", **FLAKY) == {
        "score": 4.0,
        "length": 1.0,
        FAILED_KEY: 0.0,
        ANSWER_CORRECT_KEY: None,
        **TRIVIAL_NONE,
    }

    async def inside_a_loop() -> None:
        compute_score_sync("toy", "fine", **FLAKY)

    with pytest.raises(RuntimeError, match="running event loop"):
        asyncio.run(inside_a_loop())


def test_one_reward_per_process_and_settings() -> None:
    from verl.utils.import_utils import load_extern_object

    # verl executes a file path as a fresh module on every load; the reward is still shared.
    first = load_extern_object(COMPUTE_SCORE_FILE, "compute_score")
    second = load_extern_object(COMPUTE_SCORE_FILE, "compute_score")
    assert first is not second
    kwargs = {"reward": "verl_test_structure", "settings": TOY_SETTINGS}
    spelled_out = {**kwargs, "settings": {**TOY_SETTINGS, "seed": 0}}  # the default, written out

    async def main() -> None:
        await asyncio.gather(
            *(
                fn("toy", "<think>a|b</think>", **kw)
                for fn in (first, second)
                for kw in (kwargs, spelled_out)
                for _ in range(3)
            )
        )

    asyncio.run(main())
    assert ToyStructure.built == 1


# --- SarlRewardManager through verl -------------------------------------------------------------

GROUP_N = 3


def group_config(tokenizer_dir: Path, *extra: str) -> DictConfig:
    return verl_config(
        [
            *verl_reward_overrides("verl_test_majority", None, group=True),
            f"actor_rollout_ref.model.path={tokenizer_dir}",
            f"actor_rollout_ref.rollout.n={GROUP_N}",
            f"actor_rollout_ref.rollout.val_kwargs.n={GROUP_N}",
            "data.train_batch_size=4",
            *extra,
        ]
    )


def test_reward_manager_scores_whole_groups_through_verl(
    tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [
        (f"prompt {g}?", f"u{g}", f"g{g} answer{i}{'xy'[i == 2 and g != 1]}")
        for g in range(3)
        for i in range(GROUP_N)
    ]
    random.Random(1).shuffle(rows)  # siblings arrive interleaved, like finished rollouts
    prompts, uids, responses = zip(*rows, strict=True)
    data = make_data(_tokenizer(tokenizer_dir), prompts, responses, uids)

    worker, out = run_reward_loop(group_config(tokenizer_dir), data, monkeypatch)

    assert isinstance(worker.reward_manager, SarlRewardManager)
    reward_tensor, extra = extract_reward(out)
    scores = assert_only_at_last_token(reward_tensor, data)
    by_uid: dict[str, list[str]] = {}
    for uid, text in zip(uids, responses, strict=True):
        by_uid.setdefault(uid, []).append(text)
    expected = {
        text: out.score
        for texts in by_uid.values()
        for text, out in zip(texts, majority_outputs(texts), strict=True)
    }
    assert scores.tolist() == [expected[t] for t in responses]
    scored = [g for batch in MajorityVote.batches for g in batch]
    assert len(scored) == 3
    for group in scored:
        assert len({s.extra["uid"] for s in group}) == 1 and len(group) == GROUP_N
        uid = group[0].extra["uid"]
        assert {s.prompt for s in group} == {f"prompt {uid[1:]}?"}
        assert all(s.ground_truth == "7" and s.extra["data_source"] == "toy" for s in group)
    assert list(extra) == ["score", "group_size", "votes", FAILED_KEY, ANSWER_CORRECT_KEY, *TRIVIAL]
    assert set(extra["group_size"]) == {float(GROUP_N)}


def test_reward_manager_per_sample_reward_is_batched_not_grouped(
    tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = verl_config(
        [
            *verl_reward_overrides("verl_test_structure", TOY_SETTINGS, group=True),
            f"actor_rollout_ref.model.path={tokenizer_dir}",
        ]
    )
    n = len(STRUCTURE_RESPONSES)
    data = make_data(_tokenizer(tokenizer_dir), ["q"] * n, STRUCTURE_RESPONSES, ["same"] * n)

    _, out = run_reward_loop(cfg, data, monkeypatch)

    expected = ToyStructure(StructureRewardSettings(**TOY_SETTINGS)).score_samples(
        [Sample(r) for r in STRUCTURE_RESPONSES]
    )
    reward_tensor, extra = extract_reward(out)
    scores = assert_only_at_last_token(reward_tensor, data)
    assert scores.tolist() == pytest.approx([o.score for o in expected])
    assert list(extra) == ["score", *COMPONENT_KEYS, FAILED_KEY, ANSWER_CORRECT_KEY, *TRIVIAL]


# --- truncation (tagged-reasoning A.7: tag_maxflow masks truncated completions) -----------------


@pytest.mark.parametrize(
    ("row", "valid", "truncated"),
    [
        ([5, 6, 7, 0], 3, False),  # ended with room left (verl pads after it)
        ([5, 6, 7, 8], 4, True),  # fills the buffer without an end token
        ([5, 6, 7, 1], 4, False),  # EOS exactly at the limit
        ([5, 6, 7, 0], 4, False),  # the pad id counts as an end token, as in TRL
        ([0, 0, 0, 0], 0, False),
    ],
)
def test_response_truncated(row: list[int], valid: int, truncated: bool) -> None:
    assert response_truncated(torch.tensor(row), valid, {1, 0}) is truncated


def truncation_data(tokenizer: Any) -> DataProto:
    """Three responses in a 6-token buffer: short with EOS, cut (no EOS), EOS at the limit."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows = [
        [*tokenizer.encode("done"), eos, pad],
        tokenizer.encode("cutcut"),
        [*tokenizer.encode("full!"), eos],
    ]
    valid = [5, 6, 6]
    prompt = tokenizer.encode("q?")
    prompts_t, responses_t = torch.tensor([prompt] * 3), torch.tensor(rows)  # (3, 2), (3, 6)
    mask = torch.tensor([[1] * len(prompt) + [1] * v + [0] * (6 - v) for v in valid])
    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": mask,  # (3, 8)
        },
        non_tensors={
            "data_source": np.array(["toy"] * 3, dtype=object),
            "reward_model": np.array([{"ground_truth": "7"}] * 3, dtype=object),
            "extra_info": np.array([{"index": i} for i in range(3)], dtype=object),
            "uid": np.array(["a", "b", "c"], dtype=object),
        },
    )


def test_tag_maxflow_masks_what_the_reward_manager_flags_through_verl(
    tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Untagged responses: an untruncated one scores Q = 0 without the model, a truncated one
    # gets truncated_score (a number: verl cannot leave a sample out of the loss).
    settings = {"model": "never-loaded", "truncated_score": -1.0}
    cfg = verl_config(
        [
            *verl_reward_overrides("tag_maxflow", settings, group=True),
            f"actor_rollout_ref.model.path={tokenizer_dir}",
        ]
    )
    data = truncation_data(_tokenizer(tokenizer_dir))
    manager = _manager(cfg, tokenizer_dir)
    flags = [manager.decode_sample(data[i]).extra["truncated"] for i in range(3)]
    assert flags == [False, True, False]

    _, out = run_reward_loop(cfg, data, monkeypatch)

    reward_tensor, extra = extract_reward(out)
    assert assert_only_at_last_token(reward_tensor, data).tolist() == [0.0, -1.0, 0.0]
    assert list(extra["truncated"]) == [0.0, 1.0, 0.0]


def test_a_nan_masked_score_names_the_fix_on_verl(tokenizer_dir: Path) -> None:
    settings = {"model": "never-loaded"}  # truncated_score None: NaN, which verl cannot take
    cfg = verl_config(
        [
            *verl_reward_overrides("tag_maxflow", settings, group=True),
            f"actor_rollout_ref.model.path={tokenizer_dir}",
        ]
    )
    manager = _manager(cfg, tokenizer_dir)
    data = truncation_data(manager.tokenizer)
    with pytest.raises(RewardScoringError, match="numeric truncated_score"):
        asyncio.run(manager.run_single(data[1:2]))


def test_overrides_refuse_a_truncation_masking_reward_on_the_text_only_path() -> None:
    with pytest.raises(RewardConfigError, match="masks truncated completions.*group=True"):
        verl_reward_overrides("tag_maxflow", {"model": "m", "truncated_score": 0.0}, group=False)


def _manager(cfg: DictConfig, tokenizer_dir: Path) -> SarlRewardManager:
    async def build() -> SarlRewardManager:  # verl's base class captures the running loop
        return SarlRewardManager(cfg, _tokenizer(tokenizer_dir), compute_score=None)

    return asyncio.run(build())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["reward.num_workers=2"], "reward.num_workers=2"),
        (["actor_rollout_ref.rollout.val_kwargs.n=1"], "val_kwargs.n=1"),
        ([f"++{MANAGER_OPTIONS_KEY}.timeout=3"], "timeout"),
    ],
)
def test_reward_manager_refuses_configs_that_split_groups(
    extra: list[str], message: str, tokenizer_dir: Path
) -> None:
    with pytest.raises(RewardConfigError, match=message):
        _manager(group_config(tokenizer_dir, *extra), tokenizer_dir)


@pytest.mark.parametrize("on_error", [None, 0.5])
def test_reward_manager_incomplete_group(on_error: float | None, tokenizer_dir: Path) -> None:
    extra = [f"++{MANAGER_OPTIONS_KEY}.group_timeout_s=0.1"]
    if on_error is not None:
        extra.append(f"++{MANAGER_OPTIONS_KEY}.on_error={on_error}")
    manager = _manager(group_config(tokenizer_dir, *extra), tokenizer_dir)
    data = make_data(manager.tokenizer, ["p", "p"], ["ax", "bx"], ["u", "u"])  # 2 of 3

    async def main() -> list[Any]:
        calls = [manager.run_single(data[i : i + 1]) for i in range(2)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    if on_error is None:
        assert all(isinstance(r, RewardScoringError) for r in results)
        assert "2 of 3" in str(results[0]) and "reward.num_workers=1" in str(results[0])
    else:
        assert [r["reward_score"] for r in results] == [0.5, 0.5]
        assert all(r["reward_extra_info"][FAILED_KEY] == 1.0 for r in results)
