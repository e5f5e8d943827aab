"""``embedder.kind: policy`` (SARL v1 A.1, Implementation A) is refused on the verl backend, where
the reward loop has no access to the actor's hidden states, and accepted on the TRL backend."""

from __future__ import annotations

import pytest

from sarl.integrations.cluster import check_cluster
from sarl.spec.experiment import Experiment

POLICY_REWARD = [{"name": "structure", "settings": {"embedder": {"kind": "policy"}}}]


def experiment(backend: str) -> Experiment:
    return Experiment.model_validate(
        {
            "metadata": {"name": "job"},
            "spec": {
                "preset": "paper-grpo-math",
                "reward": POLICY_REWARD,
                "resources": {"backend": backend},
            },
        }
    )


def test_verl_refuses_the_policy_embedder_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"spec\.reward\[0\]\.settings\.embedder\.kind='policy'"):
        check_cluster(experiment("verl"))


def test_trl_accepts_the_policy_embedder() -> None:
    check_cluster(experiment("trl"))
