"""sarl.integrations.cluster: the trainers' own mappings refuse, before any job, what the job
would refuse; chat endpoints without a URL are filled for the operator to serve."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.integrations.cluster import chat_endpoints, check_cluster, child_names, fill_chat_urls
from sarl.integrations.trl_cluster import cluster_overrides
from sarl.spec.experiment import Experiment
from sarl.spec.presets import PRESETS


def experiment(preset: str, **spec: Any) -> Experiment:
    return Experiment.model_validate(
        {"metadata": {"name": "job"}, "spec": {"preset": preset, **spec}}
    )


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_runs_on_its_default_backend(preset: str) -> None:
    check_cluster(experiment(preset))


def test_verl_trains_weighted_sums_and_logs_weight_0_terms() -> None:
    for reward in (
        [{"name": "structure"}, {"name": "ground_truth", "weight": 0.5}],
        [{"name": "ground_truth"}, {"name": "structure", "weight": 0.0}],
        [{"name": "structure", "weight": 2.0}],
    ):
        check_cluster(experiment("paper-grpo-math", reward=reward))


def test_verl_refuses_a_reward_in_two_terms_naming_the_field() -> None:
    exp = experiment(
        "paper-grpo-math", reward=[{"name": "structure"}, {"name": "structure", "weight": 0.0}]
    )
    with pytest.raises(ValueError, match=r"spec\.reward\[1\]\.name='structure'.*merge"):
        check_cluster(exp)


def test_trl_checks_the_cluster_batch_layout() -> None:
    exp = experiment(
        "paper-grpo-math",
        resources={"backend": "trl", "gpus_per_node": 8},
        algorithm={"micro_batch_size_per_gpu": 3, "max_tokens_per_gpu": None},
    )
    with pytest.raises(ValueError, match="must be a multiple of micro_batch_size_per_gpu"):
        check_cluster(exp)
    # Several weighted rewards are fine for TRL (it sums them).
    check_cluster(
        experiment(
            "paper-grpo-math",
            resources={"backend": "trl"},
            algorithm={"max_tokens_per_gpu": None},
            reward=[{"name": "structure"}, {"name": "ground_truth", "weight": 0.5}],
        )
    )


def test_trl_takes_the_token_budget_as_whole_responses() -> None:
    exp = experiment("paper-grpo-math", resources={"backend": "trl"})
    # 24,576 tokens hold two 9,216-token sequences: two responses per pass instead of 32.
    assert exp.spec.algorithm.responses_per_pass == 2
    assert cluster_overrides(exp, 8)["per_device_train_batch_size"] == 2
    check_cluster(exp)


def test_fill_chat_urls_fills_only_endpoints_with_a_model_and_no_url() -> None:
    spec = {
        "preset": "paper-grpo-math",
        "reward": [
            {"name": "structured_qa", "settings": {"judge_client": {"model": "judge-8b"}}},
            {"name": "rlkd", "settings": {"decomposer": {"model": "m", "url": "http://mine"}}},
            {"name": "structured_qa", "settings": {"judge": False, "judge_client": {"model": "x"}}},
        ],
    }
    out = fill_chat_urls(spec, "http://served")
    endpoints = dict(chat_endpoints(out["reward"]))
    assert endpoints["spec.reward[0].settings.judge_client"]["url"] == "http://served"
    assert endpoints["spec.reward[1].settings.decomposer"]["url"] == "http://mine"
    assert "spec.reward[2].settings.judge_client" not in endpoints  # judge off: not called
    assert "url" not in spec["reward"][0]["settings"]["judge_client"]  # the input is untouched
    assert out["algorithm"]["rollouts_per_prompt"] == 8  # the preset is applied
    assert fill_chat_urls({"preset": "nope"}, "http://x") == {"preset": "nope"}


def named(name: str, **spec: Any) -> Experiment:
    return Experiment.model_validate(
        {"metadata": {"name": name}, "spec": {"preset": "paper-grpo-math", **spec}}
    )


GROUND_TRUTH = [{"name": "ground_truth"}]
SERVED_EMBEDDER = [
    {
        "name": "structure",
        "settings": {"embedder": {"kind": "openai", "model": "Qwen/Qwen3-Embedding-0.6B"}},
    }
]


def test_child_names_follow_the_training_operator_and_kserve() -> None:
    exp = named("run", resources={"nodes": 3}, reward=SERVED_EMBEDDER)
    names = dict((name, what) for what, name in child_names(exp))
    assert {"run-config", "run-master-0", "run-worker-1", "run-eval"} <= names.keys()
    assert "run-node-0-2" in names  # Trainer v2: the TrainJob's last node pod hostname
    assert "run-embedding-predictor" in names  # KServe: <isvc>-predictor


@pytest.mark.parametrize(
    ("spec", "room"),
    [
        # The preset's embedder is served (<name>-embedding-predictor): a reward without one.
        ({"reward": GROUND_TRUTH}, 63 - len("-master-0")),
        ({"reward": GROUND_TRUTH, "resources": {"nodes": 12}}, 63 - len("-worker-10")),
        # A TrainJob's last node: <name>-node-0-10, one character more than -worker-9.
        ({"reward": GROUND_TRUTH, "resources": {"nodes": 11}}, 63 - len("-node-0-10")),
        ({"reward": SERVED_EMBEDDER}, 63 - len("-embedding-predictor")),
    ],
)
def test_the_longest_child_name_bounds_the_experiment_name(spec: dict[str, Any], room: int) -> None:
    """A name that fits in 63 characters itself, but whose child would not, is refused with
    the longest allowed length; one character less passes."""
    check_cluster(named("a" * room, **spec))
    with pytest.raises(ValueError) as info:
        check_cluster(named("a" * (room + 1), **spec))
    message = str(info.value)
    assert message.startswith(f"metadata.name='{'a' * (room + 1)}' ({room + 1} characters)")
    assert f"use at most {room} characters" in message


@pytest.mark.parametrize("name", ["1run", "9-lives", "-a", "a-", "A", "a_b", "a" * 64])
def test_names_must_be_dns_1035_labels(name: str) -> None:
    """The Training Operator's and KServe's webhooks refuse names starting with a digit."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="DNS-1035"):
        named(name)
