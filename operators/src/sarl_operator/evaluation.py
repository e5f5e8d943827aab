"""Pure builder of the evaluation Job: a trained Experiment's checkpoint on the math benchmarks.

Called by ``experiment_conditions`` (the status timer, once training has Succeeded) and by the
golden-file tests. ``<name>-eval`` is a ``batch/v1`` Job with the trainer's image, config volume
and environment (MLflow run, checkpoint URI, S3 credentials) plus ``SARL_DATA_URI`` (where
``sarl data prepare`` wrote ``benchmarks/<name>.parquet``), running
``python -m sarl_jobs.evaluate --config /etc/sarl/experiment.yaml``, which logs ``eval/...``
metrics into the Experiment's MLflow run. With a Kueue queue (``spec.resources.queue`` or the
platform's default) it carries the queue label and is created suspended, and its pod gets
``spec.resources.priority_class`` (:mod:`sarl_operator.scheduling`).
"""

from __future__ import annotations

from typing import Any, Final

from sarl.integrations.cluster import EVAL_SUFFIX
from sarl.spec.experiment import Experiment
from sarl_operator import child_meta, job_pods, scheduling
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform

EVAL_MODULE: Final = "sarl_jobs.evaluate"
#: The benchmarks ``sarl_jobs.evaluate`` runs on a cluster; others (e.g. heldout) are the
#: trainer's own in-loop evaluation.
CLUSTER_BENCHMARKS: Final = frozenset({"math500", "aime25", "amc23", "minerva"})


def eval_name(exp: Experiment) -> str:
    return f"{exp.name}{EVAL_SUFFIX}"


def cluster_benchmarks(exp: Experiment) -> list[str]:
    """The Experiment's benchmarks that the evaluation Job runs, in spec order."""
    return [b for b in exp.spec.evaluation.benchmarks if b in CLUSTER_BENCHMARKS]


def eval_job(
    exp: Experiment,
    namespace: str,
    *,
    image: str,
    mlflow_run_id: str,
    tracking_uri: str,
    platform: Platform = DEFAULT_PLATFORM,
) -> dict[str, Any]:
    """Job ``<name>-eval``: one pod, 1 GPU (``spec.resources.gpu_resource``) when the trainer
    has GPUs, cpu, memory and scratch disk from ``spec.resources.evaluation``, no retries (a
    failed evaluation is reported as ``Evaluated=False``, and re-running it means deleting the
    Job)."""
    env = job_pods.job_env(exp, namespace, mlflow_run_id, tracking_uri, platform)
    pod_res = exp.spec.resources.evaluation
    gpus = 1 if exp.spec.resources.gpus_per_node > 0 else 0
    resources = job_pods.pod_resources(exp, pod_res.cpu, pod_res.memory, pod_res.scratch_size, gpus)
    config_path = f"{job_pods.CONFIG_DIR}/{job_pods.CONFIG_FILE}"
    container = {
        "name": "evaluate",
        "image": image,
        "command": ["python", "-m", EVAL_MODULE],
        # The checkpoint and its benchmark outputs go to the scratch volume, not the image's /tmp.
        "args": ["--config", config_path, "--workdir", f"{job_pods.SCRATCH_DIR}/sarl-eval"],
        "env": env,
        "resources": resources,
    }
    pod = {"restartPolicy": "Never", **job_pods.job_pod(exp, container, pod_res.scratch_size)}
    pod.update(scheduling.pod_priority(exp))
    metadata = child_meta.meta(exp, eval_name(exp), namespace, "evaluation")
    metadata["labels"].update(scheduling.job_labels(exp, platform))
    spec: dict[str, Any] = {"backoffLimit": 0}
    if scheduling.starts_suspended(exp, platform):  # Kueue unsuspends it on admission
        spec["suspend"] = True
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            **spec,
            "template": {
                "metadata": {
                    "labels": child_meta.labels(exp, "evaluation"),
                    "annotations": dict(job_pods.JOB_POD_ANNOTATIONS),
                },
                "spec": pod,
            },
        },
    }
