"""The small warm-started policy the causal-LM embedder tests share (and the runner test that
trains with ``embedder.kind: policy``).

``TINY_RUN`` is the Experiment those tests use; :func:`prepare` builds its policy into a cache
directory that is the same for the whole pytest session, so it is built once
(``prepare_tiny_policy`` is keyed by the spec, file-locked and reused) and the local runner
finds it there.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from sarl.runner.threads import one_torch_thread
from sarl.spec import load_experiment
from sarl.spec.experiment import Experiment

#: The Experiment of the tiny runs: a short warm start, so the policy already writes `<think>`
#: steps separated by blank lines (what Implementation A pools), built in seconds on a CPU.
TINY_RUN: dict[str, Any] = {
    "metadata": {"name": "policy-embedder"},
    "spec": {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 60}},
        "data": {"train_size": 8, "eval_size": 2, "difficulty": 2},
        "algorithm": {
            "rollouts_per_prompt": 2,
            "train_batch_size": 2,
            "mini_batch_size": 2,
            "max_response_length": 48,
            "max_steps": 2,
            "learning_rate": 1e-3,
        },
        "evaluation": {"k": 1, "every_n_steps": 100, "max_problems": 2},
        "tracking": {"log_maps_every_n_steps": 1},
        "storage": {"every_n_steps": 100},
        "reward": [
            {
                "name": "structure",
                "weight": 1.0,
                "settings": {"embedder": {"kind": "policy"}, "workers": 1},
            },
            {"name": "ground_truth", "weight": 0.0},
        ],
    },
}


def tiny_experiment(name: str = "policy-embedder") -> Experiment:
    spec = copy.deepcopy(TINY_RUN)
    spec["metadata"]["name"] = name
    return load_experiment(spec)


def workdir(factory: pytest.TempPathFactory) -> Path:
    """The session's ``.sarl`` work directory of these tests: its ``cache/`` holds the policy."""
    path = factory.getbasetemp() / "sarl-policy-embedder"
    path.mkdir(exist_ok=True)
    return path


def prepare(factory: pytest.TempPathFactory) -> Path:
    """The warm-started tiny policy's directory (built on first use in the session)."""
    from sarl.runner.tiny import prepare_tiny_policy

    exp = tiny_experiment()
    with one_torch_thread():
        return prepare_tiny_policy(
            exp.spec.data,
            exp.spec.model,
            cache_dir=workdir(factory) / "cache",
            max_response_tokens=exp.spec.algorithm.max_response_length,
            progress=False,
        )
