"""The scheduling fields on the jobs the operator builds: the Kueue queue label and suspend on the
PyTorchJob and the evaluation Job, ``priorityClassName`` on every trainer and evaluation pod, the
gang's ``schedulingPolicy`` and ``schedulerName`` on multi-node PyTorchJobs — and none of them
without a queue, priority or gang (the golden files hold that case). PyTorchJobs are validated
against the Training Operator v1.9.0 CRD (fixtures/upstream/training-operator-v1.9.0), unknown
fields refused (the API server would prune them silently)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from sarl.spec.experiment import Experiment
from sarl_operator import builders, evaluation, scheduling
from sarl_operator.platform_settings import Platform
from tests.charts.test_crd import _as_json_schema
from tests.operators.cases import (
    CASES,
    IMAGE,
    NAMESPACE,
    PLATFORM,
    RUN_ID,
    TRACKING_URI,
    experiment_of,
)
from tests.operators.upstream_crds import strict

CRD: Final = (
    Path(__file__).parent
    / "fixtures"
    / "upstream"
    / "training-operator-v1.9.0"
    / "kubeflow.org_pytorchjobs.yaml"
)
KUEUE: Final = Platform(**{**PLATFORM.__dict__, "default_queue": "shared"})


@functools.cache
def _validator() -> Any:
    import jsonschema

    doc = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft4Validator(_as_json_schema(strict(version["schema"]["openAPIV3Schema"])))


def _exp(**resources: Any) -> Experiment:
    doc = CASES["sarl-grpo-math-2node"]()
    doc["spec"]["resources"] = {**doc["spec"]["resources"], **resources}
    return experiment_of(doc)


def _pytorchjob(exp: Experiment, platform: Platform) -> dict[str, Any]:
    job = builders.pytorchjob(
        exp, NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI,
        platform=platform,
    )  # fmt: skip
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(job)]
    assert errors == []
    return job


def _eval_job(exp: Experiment, platform: Platform) -> dict[str, Any]:
    return evaluation.eval_job(
        exp, NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI,
        platform=platform,
    )  # fmt: skip


def _pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


@pytest.mark.parametrize(
    ("resources", "platform", "queue"),
    [
        ({"queue": "team-a"}, PLATFORM, "team-a"),
        ({}, KUEUE, "shared"),
        ({"queue": "team-a"}, KUEUE, "team-a"),
    ],
)
def test_queued_jobs_are_labelled_and_suspended(
    resources: dict[str, Any], platform: Platform, queue: str
) -> None:
    exp = _exp(**resources)
    job, eval_job = _pytorchjob(exp, platform), _eval_job(exp, platform)
    assert job["metadata"]["labels"][scheduling.QUEUE_LABEL] == queue
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert eval_job["metadata"]["labels"][scheduling.QUEUE_LABEL] == queue
    assert eval_job["spec"]["suspend"] is True
    # The queue is read from the job, never from its pods.
    assert all(scheduling.QUEUE_LABEL not in pod for pod in _pods(job))


def test_without_a_queue_nothing_is_suspended_or_labelled() -> None:
    exp = _exp()
    job, eval_job = _pytorchjob(exp, PLATFORM), _eval_job(exp, PLATFORM)
    assert "suspend" not in job["spec"]["runPolicy"] and "suspend" not in eval_job["spec"]
    assert scheduling.QUEUE_LABEL not in job["metadata"]["labels"]
    assert scheduling.QUEUE_LABEL not in eval_job["metadata"]["labels"]


def test_priority_class_on_every_trainer_and_evaluation_pod() -> None:
    exp = _exp(priority_class="research-high")
    pods = [
        *_pods(_pytorchjob(exp, PLATFORM)),
        _eval_job(exp, PLATFORM)["spec"]["template"]["spec"],
    ]
    assert [p.get("priorityClassName") for p in pods] == ["research-high"] * 3
    no_priority = _pytorchjob(_exp(), PLATFORM)
    assert all("priorityClassName" not in p for p in _pods(no_priority))


@pytest.mark.parametrize(
    ("gang", "scheduler"),
    [("volcano", "volcano"), ("scheduler-plugins", "scheduler-plugins-scheduler")],
)
def test_gang_scheduling_of_a_multi_node_job(gang: str, scheduler: str) -> None:
    platform = Platform(**{**PLATFORM.__dict__, "gang_scheduler": gang})
    job = _pytorchjob(_exp(priority_class="research-high"), platform)
    policy = job["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy == {"minAvailable": 2, "priorityClass": "research-high"}
    assert [p["schedulerName"] for p in _pods(job)] == [scheduler, scheduler]
    # The evaluation Job is one pod: no gang, the default scheduler.
    assert "schedulerName" not in _eval_job(_exp(), platform)["spec"]["template"]["spec"]


def test_one_node_needs_no_gang() -> None:
    platform = Platform(**{**PLATFORM.__dict__, "gang_scheduler": "volcano"})
    job = _pytorchjob(_exp(nodes=1), platform)
    assert "schedulingPolicy" not in job["spec"]["runPolicy"]
    assert all("schedulerName" not in p for p in _pods(job))


def test_builder_update_never_suspends_an_admitted_job() -> None:
    """reconcile merge-patches ``PyTorchJobBuilder.update(job)`` onto an existing job: without
    ``suspend`` and the queue label, which Kueue owns once the job exists."""
    job = _pytorchjob(_exp(queue="team-a"), PLATFORM)
    patch = builders.PyTorchJobBuilder().update(job)
    assert "suspend" not in patch["spec"]["runPolicy"]
    assert scheduling.QUEUE_LABEL not in patch["metadata"]["labels"]
    assert patch["spec"]["pytorchReplicaSpecs"] == job["spec"]["pytorchReplicaSpecs"]


def test_the_crd_check_refuses_an_unknown_field() -> None:
    """The validator above is not vacuous: a misspelt scheduling field fails it."""
    job = builders.pytorchjob(
        _exp(), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI
    )
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"minMember": 2}
    assert [e.message for e in _validator().iter_errors(job)] != []
