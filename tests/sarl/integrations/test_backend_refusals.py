"""Every refusal of a spec by a cluster backend (``check_cluster``, what ``sarl submit`` and the
operator run) or by the local runner names the setting that makes it run."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.integrations.cluster import check_cluster
from sarl.runner.preflight import PreflightError, check_algorithm
from sarl.spec import SpecError, load_experiment


def exp(**spec: Any) -> Any:
    return load_experiment({"metadata": {"name": "x"}, "spec": spec})


@pytest.mark.parametrize(
    ("spec", "fix"),
    [
        (  # verl: each term's curves are named after its reward
            {
                "preset": "paper-grpo-math",
                "reward": [{"name": "ground_truth"}, {"name": "ground_truth", "weight": 0.0}],
            },
            "spec.reward[1].name='ground_truth': reward 'ground_truth' is already spec.reward[0]; "
            "on the verl trainer each reward may appear once (its curves are named after it): "
            "merge the two terms into one",
        ),
        (  # verl: rollouts come from vLLM, which gives no hidden states
            {
                "preset": "paper-grpo-math",
                "reward": [
                    {"name": "ground_truth"},
                    {
                        "name": "structure",
                        "weight": 0.0,
                        "settings": {"embedder": {"kind": "policy"}},
                    },
                ],
            },
            "spec.reward[1].settings.embedder.kind='policy': the verl trainer cannot give the "
            "reward the policy's hidden states",
        ),
        (  # TRL: the completions of an optimizer step split evenly over the GPUs
            {"preset": "local-grpo-arithmetic", "resources": {"backend": "trl"}},
            "(16 * 8 = 128) on the TRL trainer; set spec.algorithm.micro_batch_size_per_gpu: 8",
        ),
        (
            {
                "preset": "local-grpo-arithmetic",
                "algorithm": {"micro_batch_size_per_gpu": 1, "mini_batch_size": 3},
                "resources": {"backend": "trl", "gpus_per_node": 2},
            },
            "train_batch_size (8) must be a multiple of mini_batch_size (3) on the TRL trainer; "
            "set spec.algorithm.mini_batch_size: 2",
        ),
        (
            {
                "preset": "local-grpo-arithmetic",
                "algorithm": {"micro_batch_size_per_gpu": 1, "rollouts_per_prompt": 3},
                "resources": {"backend": "trl", "gpus_per_node": 16},
            },
            "set spec.resources.gpus_per_node: 12, or spec.algorithm.mini_batch_size * "
            "rollouts_per_prompt to a multiple of 16",
        ),
    ],
)
def test_cluster_refusals_name_the_fix(spec: dict[str, Any], fix: str) -> None:
    with pytest.raises(ValueError) as info:
        check_cluster(exp(**spec))
    assert fix in str(info.value)


def test_ppo_on_trl_names_both_fixes() -> None:
    with pytest.raises(SpecError) as info:
        exp(preset="paper-ppo-math", resources={"backend": "trl"})
    assert str(info.value).endswith(
        "set spec.resources.backend: verl, or spec.algorithm.name: grpo"
    )


@pytest.mark.parametrize(
    ("algorithm", "fix"),
    [
        ({"name": "ppo"}, "Use 'grpo' or 'rloo' for local runs, or `sarl submit` it"),
        ({"kl_type": "k1"}, "set spec.algorithm.kl_type: low_var_kl here, or `sarl submit` it"),
    ],
)
def test_local_refusals_name_the_fix(algorithm: dict[str, Any], fix: str) -> None:
    with pytest.raises(PreflightError, match=fix.replace("(", r"\(")):
        check_algorithm(exp(algorithm=algorithm))
