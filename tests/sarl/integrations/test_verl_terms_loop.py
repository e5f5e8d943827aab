"""Several weighted reward terms through verl 0.9.1's own reward loop: verl trains on the sum, and
every term (weight-0 ones too) reaches verl's ``reward_extra_info`` under the names the TRL path
logs.

Relies on verl 0.9.1 (paths under ``verl/``): ``trainer/ppo/reward.py:get_custom_reward_fn``
(loads ``compute_score`` with ``reward.custom_reward_function.reward_kwargs``, the ``terms``
list composed from the Hydra overrides), ``experimental/reward_loop/reward_loop.py``
(``RewardLoopWorker`` builds the reward manager as verl does; ``RewardLoopManager.
compute_rm_score`` stacks each result's ``reward_extra_info`` per key into ``non_tensor_batch``
and lists the keys in ``meta_info["reward_extra_keys"]``, read back by ``trainer/ppo/reward.py:
extract_reward``), ``trainer/ppo/metric_utils.py:process_validation_metrics`` (validation metrics
per extra-info key, which the trainers log as ``val-aux/<data_source>/<key>/<stat>``),
``experimental/reward_loop/reward_manager/naive.py:NaiveRewardManager.
run_single`` (the default manager: ``score`` of the returned dict is the reward, every key is
extra info) and ``experimental/reward_loop/reward_manager/base.py:RewardManagerBase`` (the base
of ``SarlRewardManager``, used when a term needs groups). Ray is replaced by in-process calls
(``run_reward_loop`` of ``test_verl.py``). Skipped without verl (the TRL environment).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.metric_utils import process_validation_metrics
from verl.trainer.ppo.reward import extract_reward, get_custom_reward_fn

from sarl.evaluation.trivial import TRIVIAL
from sarl.integrations.verl.batcher import SHARED
from sarl.integrations.verl.compute_score import (
    FAILED_KEY,
    RewardScoringError,
    compute_score,
)
from sarl.integrations.verl.overrides import (
    TermOptions,
    parse_score_options,
    verl_terms_overrides,
)
from sarl.integrations.verl.reward_manager import SarlRewardManager
from sarl.integrations.verl.validity import ANSWER_CORRECT_KEY
from sarl.rewards.base import Sample
from sarl.rewards.registry import RewardConfigError, register_reward
from sarl.rewards.structure.reward import COMPONENT_KEYS, StructureRewardSettings
from tests.sarl.integrations.test_verl import (
    STRUCTURE_RESPONSES,
    TOY_SETTINGS,
    Flaky,
    HashEmbedder,
    MajorityVote,
    ToyStructure,
    assert_only_at_last_token,
    majority_outputs,
    make_data,
    run_reward_loop,
    save_char_tokenizer,
    verl_config,
)
from tests.sarl.integrations.test_verl_terms import Answer

STRUCTURE = "verl_test_structure"
ANSWER = "terms_test_answer"
MAJORITY = "verl_test_majority"
#: What a structure term and an answer term report, in spec order (sarl.integrations.verl.terms).
STRUCTURE_KEYS = [f"reward/{STRUCTURE}", *(f"{STRUCTURE}/{k}" for k in COMPONENT_KEYS)]
ANSWER_KEYS = [f"reward/{ANSWER}", f"{ANSWER}/answered"]


@pytest.fixture(autouse=True)
def _registered_rewards() -> Iterator[None]:
    for cls in (ToyStructure, MajorityVote, Flaky, Answer):
        register_reward(cls)
    HashEmbedder.calls.clear()
    MajorityVote.batches.clear()
    yield
    SHARED.close()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_char_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _tokenizer(path: Path) -> Any:
    from verl.utils import hf_tokenizer

    return hf_tokenizer(str(path))


def _structure_scores() -> list[float]:
    reward = ToyStructure(StructureRewardSettings(**TOY_SETTINGS))
    return [o.score for o in reward.score_samples([Sample(r) for r in STRUCTURE_RESPONSES])]


@pytest.mark.parametrize(("w_structure", "w_answer"), [(1.0, 0.0), (0.7, 0.3)])
def test_compute_score_trains_on_the_sum_and_reports_every_term(
    w_structure: float, w_answer: float, tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    terms = [
        TermOptions(reward=STRUCTURE, weight=w_structure, settings=TOY_SETTINGS),
        TermOptions(reward=ANSWER, weight=w_answer),
    ]
    cfg = verl_config(
        [
            *verl_terms_overrides(terms, group=False),
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

    assert type(worker.reward_manager) is NaiveRewardManager  # verl's default manager
    reward_tensor, extra = extract_reward(out)
    structure = _structure_scores()
    answer = [float(r.endswith("7")) for r in STRUCTURE_RESPONSES]  # make_data's ground truth
    scores = assert_only_at_last_token(reward_tensor, data)
    assert scores.tolist() == pytest.approx(
        [w_structure * s + w_answer * a for s, a in zip(structure, answer, strict=True)]
    )
    assert list(extra) == [
        "score",
        *STRUCTURE_KEYS,
        *ANSWER_KEYS,
        FAILED_KEY,
        ANSWER_CORRECT_KEY,
        *TRIVIAL,
    ]
    assert list(extra[f"reward/{STRUCTURE}"]) == pytest.approx(structure)
    assert list(extra[f"reward/{ANSWER}"]) == answer
    assert extra[f"{STRUCTURE}/path_length"][1] is None  # one node: undefined, as single-term
    assert list(extra[FAILED_KEY]) == [0.0] * n
    # make_data's ground truth is "7" and no response boxes an answer: all known, all wrong.
    assert list(extra[ANSWER_CORRECT_KEY]) == [0.0] * n
    # verl's n concurrent calls became one embedder request for the whole batch.
    assert len(HashEmbedder.calls) == 2  # 1 here + 1 for _structure_scores
    # Validation turns every key into val-aux/<data_source>/<key>/mean@<n> (one sample per uid).
    infos = {key: list(values) for key, values in extra.items()}
    metrics = process_validation_metrics(["toy"] * n, [f"u{i}" for i in range(n)], infos)["toy"]
    assert metrics[f"reward/{ANSWER}"]["mean@1"] == pytest.approx(sum(answer) / n)
    assert metrics[f"reward/{STRUCTURE}"]["mean@1"] == pytest.approx(sum(structure) / n)


GROUP_N = 3


def test_a_group_term_keeps_groups_whole_and_the_weight_0_term_is_reported(
    tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    terms = [
        TermOptions(reward="verl_test_majority", weight=1.0),
        TermOptions(reward=ANSWER, weight=0.0),
    ]
    cfg = verl_config(
        [
            *verl_terms_overrides(terms, group=True),
            f"actor_rollout_ref.model.path={tokenizer_dir}",
            f"actor_rollout_ref.rollout.n={GROUP_N}",
            f"actor_rollout_ref.rollout.val_kwargs.n={GROUP_N}",
            "data.train_batch_size=4",
        ]
    )
    rows = [
        (f"prompt {g}?", f"u{g}", f"g{g} answer{i}{'x7'[i == 2 and g != 1]}")
        for g in range(3)
        for i in range(GROUP_N)
    ]
    random.Random(1).shuffle(rows)  # siblings arrive interleaved, like finished rollouts
    prompts, uids, responses = zip(*rows, strict=True)
    data = make_data(_tokenizer(tokenizer_dir), prompts, responses, uids)

    worker, out = run_reward_loop(cfg, data, monkeypatch)

    assert isinstance(worker.reward_manager, SarlRewardManager)
    reward_tensor, extra = extract_reward(out)
    by_uid: dict[str, list[str]] = {}
    for uid, text in zip(uids, responses, strict=True):
        by_uid.setdefault(uid, []).append(text)
    majority = {
        text: o.score
        for texts in by_uid.values()
        for text, o in zip(texts, majority_outputs(texts), strict=True)
    }
    scores = assert_only_at_last_token(reward_tensor, data)
    assert scores.tolist() == [majority[t] for t in responses]  # the answer term: weight 0
    assert [len(g) for batch in MajorityVote.batches for g in batch] == [GROUP_N] * 3
    majority_keys = ["reward/verl_test_majority", "verl_test_majority/group_size"]
    assert list(extra) == [
        "score",
        *majority_keys,
        "verl_test_majority/votes",
        *ANSWER_KEYS,
        FAILED_KEY,
        ANSWER_CORRECT_KEY,
        *TRIVIAL,
    ]
    assert list(extra[f"reward/{ANSWER}"]) == [float(t.endswith("7")) for t in responses]


def test_terms_options_survive_hydra() -> None:
    """Nested settings in the ``terms`` list come back from verl's config as written."""
    embedder = {"kind": "openai", "url": "http://e:8000/v1", "model": "Qwen/Qwen3-Embedding-0.6B"}
    terms = [
        TermOptions(reward="structure", weight=0.7, settings={"embedder": embedder}),
        TermOptions(reward="ground_truth", weight=0.3),
    ]
    fn = get_custom_reward_fn(verl_config(verl_terms_overrides(terms, group=False)))
    assert fn is not None and fn.args[0] is compute_score
    assert parse_score_options(fn.args[1]).terms == terms


FLAKY_TERMS = {"terms": [{"reward": "verl_test_flaky"}, {"reward": ANSWER, "weight": 0.0}]}


def test_a_failed_sum_names_its_terms_and_follows_on_error() -> None:
    with pytest.raises(RewardScoringError, match=r"'1\*verl_test_flaky \+ 0\*terms_test_answer'"):
        asyncio.run(compute_score("toy", "boom", "7", None, **FLAKY_TERMS, max_wait_ms=0.0))
    result = asyncio.run(
        compute_score("toy", "boom", "7", None, **FLAKY_TERMS, max_wait_ms=0.0, on_error=-1)
    )
    assert result == {
        "score": -1.0,
        "reward/verl_test_flaky": None,
        "verl_test_flaky/length": None,
        f"reward/{ANSWER}": None,
        f"{ANSWER}/answered": None,
        FAILED_KEY: 1.0,
        ANSWER_CORRECT_KEY: None,
        **dict.fromkeys(TRIVIAL),
    }


def test_an_undefined_term_is_reported_as_none_with_weight_0_and_refused_weighted() -> None:
    logged = {"terms": [{"reward": "verl_test_flaky"}, {"reward": ANSWER, "weight": 0.0}]}
    result = asyncio.run(compute_score("toy", "abc", None, None, **logged, max_wait_ms=0.0))
    assert result["score"] == 3.0 and result[f"reward/{ANSWER}"] is None  # no ground truth
    trained = {"terms": [{"reward": "verl_test_flaky"}, {"reward": ANSWER, "weight": 0.5}]}
    with pytest.raises(RewardScoringError, match="non-finite score"):
        asyncio.run(compute_score("toy", "abc", None, None, **trained, max_wait_ms=0.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reward": ANSWER, "terms": [{"reward": ANSWER}]}, "either reward"),
        ({"terms": [{"reward": ANSWER}, {"reward": ANSWER}]}, "is already terms"),
        ({"terms": [{"reward": "verl_test_majority"}]}, "needs whole groups"),
        ({"terms": [{"reward": ANSWER, "weight": float("inf")}]}, "weight"),
        ({"terms": []}, "terms"),
    ],
)
def test_terms_config_errors_always_raise(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RewardConfigError, match=message):
        asyncio.run(compute_score("toy", "abc", "7", None, **kwargs, on_error=-1))
