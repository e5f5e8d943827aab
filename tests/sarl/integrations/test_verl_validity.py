"""Reward-validity metrics on verl: the pure batch figures (sarl.integrations.verl.validity), the
``answer_correct`` extra info, and ``SarlReplayBuffer`` built the way verl 0.9.1's v1 trainer
builds a custom sampler.

Upstream behaviour relied on (verl 0.9.1, paths under ``verl/``): ``trainer/ppo/v1/
trainer_base.py:PPOTrainer._build_replay_buffer`` loads ``trainer.v1.sampler.custom_sampler``
with ``load_extern_type(path, name)`` and passes only the base constructor arguments;
``_step_once`` merges the metrics ``sample()`` returns into the step's metrics;
``trainer/ppo/v1/replay_buffer.py`` names trajectories ``{uid}_{session}_{output}`` and reads
``extra_fields.reward_extra_info`` through ``tq.kv_batch_get`` (``_dapo_filtered_keys``). The
TransferQueue is replaced by a dict here (it needs its Ray-backed storage service); the sampling
itself is verl's own ``ReplayBuffer.sample``, replaced by a stand-in that returns a fixed batch.
Skipped without verl (the TRL environment).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from sarl.evaluation.validity import validity
from sarl.integrations.verl.validity import (
    ANSWER_CORRECT_KEY,
    batch_validity,
    last_outputs,
    reward_scores,
)


def info(score: float, correct: float | None, **terms: float) -> dict[str, Any]:
    return {
        "score": score,
        ANSWER_CORRECT_KEY: correct,
        **{f"reward/{k}": v for k, v in terms.items()},
    }


def test_single_reward_is_measured_from_score() -> None:
    keys = ["a_0_0", "a_1_0", "a_2_0", "b_0_0", "b_1_0"]
    infos = [info(0.9, 1.0), info(0.1, 0.0), info(0.5, 0.0), info(0.2, 1.0), info(0.8, 0.0)]
    metrics = batch_validity(keys, infos, "structure")
    expected = validity([0.9, 0.1, 0.5, 0.2, 0.8], [True, False, False, True, False], list("aaabb"))
    assert metrics == {
        "validity/structure/auroc": expected.auroc,
        "validity/structure/pair_agreement": expected.pair_agreement,
        "validity/structure/pair_ties": expected.pair_ties,
    }
    # a: 0.9 beats 0.1 and 0.5 (2 agree); b: 0.2 loses to 0.8 -> 2 of 3 pairs agree
    assert metrics["validity/structure/pair_agreement"] == pytest.approx(2 / 3)


def test_terms_are_measured_each_weight_zero_included() -> None:
    keys = ["u_0_0", "u_1_0"]
    infos = [
        info(1.3, 1.0, ground_truth=1.0, structure=0.3),
        info(0.6, 0.0, ground_truth=0.0, structure=0.6),
    ]
    metrics = batch_validity(keys, infos, "ignored")
    assert metrics["validity/ground_truth/pair_agreement"] == 1.0
    assert metrics["validity/structure/pair_agreement"] == 0.0
    assert not any(k.startswith("validity/ignored/") for k in metrics)


def test_the_trivial_predictors_are_measured_beside_the_rewards() -> None:
    keys = ["a_0_0", "a_1_0", "a_2_0"]
    infos = [info(0.9, 1.0), info(0.5, 0.0), info(0.1, 0.0)]
    for i, answered in zip(infos, (1.0, 1.0, 0.0), strict=True):
        i["trivial.has_answer"] = i["trivial.format_valid"] = answered
    metrics = batch_validity(keys, infos, "r")
    # one pair ordered right (the unanswered response), one tied
    assert metrics["validity/trivial.has_answer/pair_agreement"] == 0.5
    assert metrics["validity/trivial.has_answer/pair_ties"] == 0.5
    assert metrics["validity/r/pair_agreement"] == 1.0


def test_no_figures_without_ground_truth_for_every_response() -> None:
    keys = ["a_0_0", "a_1_0"]
    assert batch_validity(keys, [info(1.0, 1.0), info(0.0, None)], "r") == {}
    assert batch_validity(keys, [info(1.0, 1.0), {"score": 0.0}], "r") == {}
    assert batch_validity([], [], "r") == {}


def test_only_the_last_output_of_a_session_counts() -> None:
    keys = ["a_0_0", "a_0_1", "a_1_0", "b_0_0"]
    assert last_outputs(keys) == [1, 2, 3]
    assert last_outputs(["plain", "a_0_0"]) == [0, 1]


def test_undefined_scores_are_left_out() -> None:
    scores = reward_scores([{"reward/s": None}, {"reward/s": 0.5}, {}], "x")
    assert math.isnan(scores["s"][0]) and scores["s"][1] == 0.5 and math.isnan(scores["s"][2])


def test_mismatched_inputs_are_errors() -> None:
    with pytest.raises(ValueError, match="2 keys for 1"):
        batch_validity(["a_0_0", "a_1_0"], [info(1.0, 1.0)], "r")


verl = pytest.importorskip("verl")


def test_results_carry_answer_correctness() -> None:
    from sarl.integrations.verl.compute_score import answer_correct, failed_result, verl_result
    from sarl.rewards.base import RewardOutput, Sample
    from sarl.rewards.registry import create_reward

    reward = create_reward("ground_truth", {})
    right = Sample(response="\\boxed{4}", ground_truth="4")
    wrong = Sample(response="\\boxed{5}", ground_truth="4")
    unknown = Sample(response="\\boxed{5}")
    out = RewardOutput(1.0, {"has_answer": 1.0, "correct": 1.0})
    assert verl_result(out, reward, right)[ANSWER_CORRECT_KEY] == 1.0
    assert verl_result(out, reward, wrong)[ANSWER_CORRECT_KEY] == 0.0
    assert verl_result(out, reward, unknown)[ANSWER_CORRECT_KEY] is None
    assert answer_correct(None) is None
    # every result has the same keys (verl stacks extra info with the first sample's keys)
    assert list(failed_result(0.0, reward)) == list(verl_result(out, reward, right))
    # the trivial predictors ride along (None without a ground truth or after a failure)
    assert verl_result(out, reward, wrong)["trivial.has_answer"] == 1.0
    assert verl_result(out, reward, unknown)["trivial.has_answer"] is None
    assert failed_result(0.0, reward)["trivial.format_valid"] is None


class FakeTQ:
    """TransferQueue's ``kv_batch_get`` over a dict of ``extra_fields`` values, wrapped as verl's
    ``NonTensorData`` is (an object with ``.data``)."""

    def __init__(self, fields: dict[str, dict[str, Any]]) -> None:
        self.fields = fields
        self.calls: list[tuple[list[str], str, list[str]]] = []

    def kv_batch_get(self, *, keys: list[str], partition_id: str, select_fields: list[str]) -> Any:
        self.calls.append((list(keys), partition_id, list(select_fields)))
        return {"extra_fields": [SimpleNamespace(data=self.fields[k]) for k in keys]}


def build_sampler(overrides: list[str]) -> Any:
    """The replay buffer as verl 0.9.1's ``_build_replay_buffer`` makes a custom one."""
    import os

    from hydra import compose, initialize_config_dir
    from verl.utils.import_utils import load_extern_type

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    sampler = config.trainer.v1.sampler
    cls = load_extern_type(sampler.custom_sampler.path, sampler.custom_sampler.name)
    mode = config.trainer.v1.trainer_mode
    return cls(
        trainer_mode=mode,
        trainer_config=config.trainer.v1.get(mode, {}),
        max_off_policy_threshold=sampler.max_off_policy_threshold,
        max_off_policy_strategy=sampler.max_off_policy_strategy,
        sampler_kwargs=sampler.sampler_kwargs,
        refill_fn=lambda n: None,
    )


def spec_overrides(reward: list[dict[str, Any]]) -> list[str]:
    from sarl.integrations.verl.config import verl_overrides
    from sarl.spec.experiment import Experiment

    exp = Experiment.model_validate(
        {
            "metadata": {"name": "job"},
            "spec": {"preset": "local-grpo-arithmetic", "reward": reward},
        }
    )
    return verl_overrides(
        exp,
        train_files="/d/t.parquet",
        val_files="/d/v.parquet",
        n_gpus_per_node=1,
        nnodes=1,
        model_path="/models/tiny",
    )


def test_the_sampler_verl_builds_adds_validity_to_the_step_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verl.trainer.ppo.v1 import replay_buffer

    from sarl.integrations.verl import sampler as sampler_module

    buffer = build_sampler(spec_overrides([{"name": "ground_truth"}]))
    assert isinstance(buffer, replay_buffer.ReplayBuffer)
    keys = ["a_0_0", "a_1_0", "pad_0_0"]
    tags = [{}, {}, {"is_padding": True}]
    batch = SimpleNamespace(partition_id="train", keys=keys, tags=tags)
    monkeypatch.setattr(
        replay_buffer.ReplayBuffer,
        "sample",
        lambda self, global_steps, partition_id, batch_size: (batch, {"off_policy/x": 1.0}),
    )
    fake = FakeTQ(
        {
            "a_0_0": {"reward_extra_info": info(1.0, 1.0)},
            "a_1_0": {"reward_extra_info": info(0.0, 0.0)},
        }
    )
    monkeypatch.setattr(sampler_module, "tq", fake)
    got, metrics = buffer.sample(3, "train", 1)
    assert got is batch
    assert metrics == {
        "off_policy/x": 1.0,
        "validity/ground_truth/auroc": 1.0,
        "validity/ground_truth/pair_agreement": 1.0,
        "validity/ground_truth/pair_ties": 0.0,
    }
    assert fake.calls == [(["a_0_0", "a_1_0"], "train", ["extra_fields"])]  # padding left out
    # validation batches are not measured here (verl reports their extra info itself)
    assert buffer.sample(3, "val", 1)[1] == {"off_policy/x": 1.0}


def test_a_failure_to_measure_never_stops_training(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from verl.trainer.ppo.v1 import replay_buffer

    from sarl.integrations.verl import sampler as sampler_module

    buffer = build_sampler(spec_overrides([{"name": "ground_truth"}]))
    batch = SimpleNamespace(partition_id="train", keys=["a_0_0"], tags=[{}])
    monkeypatch.setattr(replay_buffer.ReplayBuffer, "sample", lambda self, *a: (batch, {}))

    class Broken:
        def kv_batch_get(self, **kwargs: Any) -> Any:
            raise ConnectionError("storage unit gone")

    monkeypatch.setattr(sampler_module, "tq", Broken())
    assert buffer.sample(1, "train", 1) == (batch, {})
    assert buffer.sample(2, "train", 1) == (batch, {})
    assert sum("storage unit gone" in r.getMessage() for r in caplog.records) == 1


def test_several_terms_name_the_single_reward_kwarg_after_the_first_term() -> None:
    overrides = spec_overrides([{"name": "structure", "weight": 0.0}, {"name": "ground_truth"}])
    assert "++trainer.v1.sampler.sampler_kwargs.sarl_reward='structure'" in overrides
    assert "trainer.v1.trainer_mode='sync'" in overrides
