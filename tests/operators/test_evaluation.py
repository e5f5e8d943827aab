"""The evaluation Job builder: which benchmarks trigger it, and its pod (GPU, env, config)."""

from __future__ import annotations

import pytest

from sarl_operator import evaluation
from tests.operators.cases import (
    CASES,
    IMAGE,
    NAMESPACE,
    PLATFORM,
    RUN_ID,
    TRACKING_URI,
    experiment_of,
)


@pytest.mark.parametrize(
    ("benchmarks", "expected"),
    [
        (["heldout"], []),
        (["heldout", "aime25", "wildbench", "math500"], ["aime25", "math500"]),
        (["amc23", "minerva"], ["amc23", "minerva"]),
    ],
)
def test_cluster_benchmarks(benchmarks: list[str], expected: list[str]) -> None:
    doc = CASES["sarl-grpo-math"]()
    doc["spec"]["evaluation"] = {"benchmarks": benchmarks}
    assert evaluation.cluster_benchmarks(experiment_of(doc)) == expected


# The paper preset's spec.resources.evaluation: 8 CPUs, 64Gi of memory and of scratch disk.
_EVAL_POD = {"cpu": "8", "memory": "64Gi", "ephemeral-storage": "64Gi"}


@pytest.mark.parametrize(
    ("gpus", "limits"), [(8, {**_EVAL_POD, "nvidia.com/gpu": "1"}), (0, _EVAL_POD)]
)
def test_eval_job_pod(gpus: int, limits: dict[str, str]) -> None:
    doc = CASES["sarl-grpo-math"]()
    doc["spec"]["resources"] = {"gpus_per_node": gpus}
    job = evaluation.eval_job(
        experiment_of(doc),
        NAMESPACE,
        image=IMAGE,
        mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI,
        platform=PLATFORM,
    )
    assert job["metadata"]["name"] == "sarl-grpo-math-eval" and job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["python", "-m", "sarl_jobs.evaluate"]
    assert container["args"] == [
        "--config",
        "/etc/sarl/experiment.yaml",
        "--workdir",  # on the scratch volume
        "/mnt/scratch/sarl-eval",
    ]
    assert container["resources"] == {"requests": limits, "limits": limits}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["MLFLOW_RUN_ID"] == RUN_ID and env["MLFLOW_TRACKING_URI"] == TRACKING_URI
    assert env["SARL_DATA_URI"] == "s3://sarl/data"
    assert env["SARL_CHECKPOINT_URI"] == "s3://sarl/checkpoints/research/sarl-grpo-math"
    assert env["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "sarl-s3-credentials", "key": "AWS_ACCESS_KEY_ID"}
    }
    assert pod["volumes"][0] == {"name": "config", "configMap": {"name": "sarl-grpo-math-config"}}
