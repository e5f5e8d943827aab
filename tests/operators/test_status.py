"""Status mapping: job conditions → phase and conditions, evaluation Job → ``Evaluated``,
operator conditions carried over and time-stamped once, and minimal status patches."""

from __future__ import annotations

from typing import Any

import pytest

from sarl_operator.status import (
    condition,
    desired_status,
    eval_condition,
    experiment_phase,
    failed_status,
    job_phase,
    run_ended,
    status_patch,
)
from sarl_operator.tracking import Progress


def _job(*true_types: str, false: tuple[str, ...] = ()) -> dict[str, Any]:
    conds = [{"type": t, "status": "True"} for t in true_types]
    conds += [{"type": t, "status": "False"} for t in false]
    return {"status": {"conditions": conds}}


@pytest.mark.parametrize(
    ("job", "phase"),
    [
        (None, "Pending"),
        ({}, "Pending"),
        (_job("Created"), "Pending"),
        (_job("Created", "Running"), "Running"),
        (_job("Created", "Restarting"), "Running"),
        (_job("Created", "Succeeded", false=("Running",)), "Succeeded"),
        (_job("Created", "Running", "Failed"), "Failed"),
        (_job(false=("Running", "Succeeded")), "Pending"),
    ],
)
def test_job_phase(job: dict[str, Any] | None, phase: str) -> None:
    assert job_phase(job) == phase


@pytest.mark.parametrize(
    ("job", "status", "reason"),
    [
        (None, "Unknown", "EvaluationPending"),
        ({"status": {}}, "Unknown", "EvaluationPending"),
        ({"status": {"active": 1}}, "Unknown", "EvaluationRunning"),
        (_job("Complete"), "True", "EvaluationSucceeded"),
        (_job("Failed"), "False", "EvaluationFailed"),
        (_job("Complete", false=("Failed",)), "True", "EvaluationSucceeded"),
    ],
)
def test_eval_condition(job: dict[str, Any] | None, status: str, reason: str) -> None:
    got = eval_condition(job)
    assert (got["type"], got["status"], got["reason"]) == ("Evaluated", status, reason)


def test_unchanged_status_gives_none() -> None:
    desired = desired_status(
        _job("Running"), generation=2, checkpoint_uri="s3://b/c", mlflow_run_url=""
    )
    current = {**desired, "lastStep": 40}
    assert status_patch(current, desired) is None


def test_patch_has_only_changed_fields() -> None:
    before = desired_status(_job("Created"), generation=1, checkpoint_uri="", mlflow_run_url="")
    after = desired_status(
        _job("Created", "Running"), generation=1, checkpoint_uri="", mlflow_run_url=""
    )
    assert status_patch(before, after) == {"phase": "Running", "conditions": after["conditions"]}
    assert status_patch(None, after) == after


def test_progress_and_run_fields_only_when_known() -> None:
    kwargs: dict[str, Any] = {"generation": 1, "checkpoint_uri": "", "mlflow_run_url": "u"}
    with_progress = desired_status(
        None, mlflow_run_id="r1", progress=Progress(step=7, reward=0.25), **kwargs
    )
    assert (with_progress["lastStep"], with_progress["lastReward"]) == (7, 0.25)
    assert with_progress["mlflowRunId"] == "r1"
    without = desired_status(None, **kwargs)
    assert "lastStep" not in without and "mlflowRunId" not in without
    # A failed metrics read (progress None) keeps the last values: they are not in the patch.
    assert status_patch(with_progress, {**without, "mlflowRunId": "r1"}) is None


def test_operator_conditions_carried_over_and_stamped_on_transition_only() -> None:
    tracking = condition("TrackingReady", "False", "TrackingUnavailable", "down")
    first = desired_status(
        None, generation=1, checkpoint_uri="", mlflow_run_url="", conditions=[tracking], now="t1"
    )
    assert first["conditions"] == [{**tracking, "lastTransitionTime": "t1"}]
    # The timer recomputes only Evaluated: TrackingReady is carried over, unchanged.
    timer = desired_status(
        _job("Running"),
        generation=1,
        checkpoint_uri="",
        mlflow_run_url="",
        conditions=[condition("Evaluated", "Unknown", "EvaluationPending")],
        current=first,
        now="t2",
    )
    types = [c["type"] for c in timer["conditions"]]
    assert types == ["Running", "TrackingReady", "Evaluated"]
    assert timer["conditions"][1]["lastTransitionTime"] == "t1"
    # Same status again: the stamp is kept, so nothing changes; a new status gets a new stamp.
    again = desired_status(
        None,
        generation=1,
        checkpoint_uri="",
        mlflow_run_url="",
        conditions=[tracking],
        current=first,
        now="t3",
    )
    assert status_patch(first, again) is None
    up = condition("TrackingReady", "True", "RunReady")
    later = desired_status(
        None,
        generation=1,
        checkpoint_uri="",
        mlflow_run_url="",
        conditions=[up],
        current=first,
        now="t4",
    )
    assert later["conditions"][0]["lastTransitionTime"] == "t4"


def test_failed_status_names_the_message() -> None:
    got = failed_status("spec.algorithm.learning_rate=-1: must be > 0", 3, "t")
    assert got["phase"] == "Failed" and got["observedGeneration"] == 3
    assert got["conditions"] == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "InvalidSpec",
            "message": "spec.algorithm.learning_rate=-1: must be > 0",
            "lastTransitionTime": "t",
        }
    ]


@pytest.mark.parametrize(
    ("job", "evaluated", "ended"),
    [
        (None, None, False),
        (_job("Created", "Running"), None, False),
        (_job("Running", "Failed"), None, True),
        (_job("Succeeded"), None, True),  # no evaluation Job
        (_job("Succeeded"), condition("Evaluated", "Unknown", "EvaluationRunning"), False),
        (_job("Succeeded"), condition("Evaluated", "True", "EvaluationSucceeded"), True),
        (_job("Succeeded"), condition("Evaluated", "False", "EvaluationFailed"), True),
    ],
)
def test_run_ended_once_training_and_evaluation_are_over(
    job: dict[str, Any] | None, evaluated: dict[str, Any] | None, ended: bool
) -> None:
    assert run_ended(job, evaluated) is ended


@pytest.mark.parametrize(
    ("job", "queued", "phase"),
    [
        (None, False, "Pending"),
        (_job("Created"), True, "Queued"),
        # Suspended again by Kueue (evicted): its own conditions may still say Running.
        (_job("Created", "Running"), True, "Queued"),
        (_job("Created", "Running"), False, "Running"),
        (_job("Created", "Succeeded"), True, "Succeeded"),  # an ended job stays ended
        (_job("Created", "Failed"), True, "Failed"),
    ],
)
def test_queued_phase(job: dict[str, Any] | None, queued: bool, phase: str) -> None:
    assert experiment_phase(job, queued) == phase
    desired = desired_status(
        job, generation=1, checkpoint_uri="", mlflow_run_url="", queued=queued, now="t"
    )
    assert desired["phase"] == phase


def test_a_suspended_evaluation_job_is_queued() -> None:
    job = {"spec": {"suspend": True}, "status": {}}
    assert eval_condition(job)["reason"] == "EvaluationQueued"
    assert eval_condition({"spec": {"suspend": False}, "status": {}})["reason"] == (
        "EvaluationPending"
    )
