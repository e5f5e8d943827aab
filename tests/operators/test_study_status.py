"""Study status (pure): counts by outcome, phase from the runs and the report Job, conditions
carried over and time-stamped once, and no patch when nothing changed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sarl.spec.study import Study
from sarl_operator.status import condition, status_patch
from sarl_operator.study_builders import RunState
from sarl_operator.study_status import Counts, desired_status
from tests.operators.study_cases import small_doc, study

NOW = "2025-01-01T00:00:00Z"
LATER = "2025-01-01T00:05:00Z"


def _study() -> Study:
    return study(small_doc("st", seeds=2))  # runs: low-s0, high-s0, low-s1, high-s1


def _states(outcomes: Sequence[str | None], foreign: Sequence[int] = ()) -> list[RunState]:
    out = []
    for i, (run, outcome) in enumerate(zip(_study().runs(), outcomes, strict=True)):
        if i in foreign:
            out.append(RunState(run, exists=True, foreign=True))
        elif outcome is None:
            out.append(RunState(run))
        else:
            out.append(RunState(run, outcome, exists=True))  # type: ignore[arg-type]
    return out


def _job(*true_types: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": t, "status": "True"} for t in true_types]}}


def _status(
    outcomes: Sequence[str | None],
    report: dict[str, Any] | None = None,
    run_id: str = "parent",
    current: dict[str, Any] | None = None,
    foreign: Sequence[int] = (),
    conditions: Sequence[dict[str, Any]] = (),
    now: str = NOW,
) -> dict[str, Any]:
    return desired_status(
        _states(outcomes, foreign),
        study_name="st",
        generation=3,
        report_job=report,
        parent_run_id=run_id,
        run_url="https://mlflow/#/experiments/1/runs/parent" if run_id else "",
        conditions=conditions,
        current=current,
        now=now,
    )


def _cond(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status["conditions"] if c["type"] == type_), None)


def test_counts_by_outcome() -> None:
    counts = Counts.of(_states([None, "pending", "running", "failed"]))
    assert counts == Counts(total=4, pending=2, running=1, succeeded=0, failed=1)


@pytest.mark.parametrize(
    ("outcomes", "phase"),
    [
        ([None, None, None, None], "Pending"),
        (["pending", "pending", None, None], "Pending"),
        (["running", None, None, None], "Running"),
        (["succeeded", "pending", None, None], "Running"),
    ],
)
def test_phase_while_runs_are_unfinished(outcomes: list[str | None], phase: str) -> None:
    status = _status(outcomes)
    assert status["phase"] == phase
    assert (status["total"], status["observedGeneration"]) == (4, 3)
    assert status["mlflowParentRunId"] == "parent" and status["mlflowRunUrl"].endswith("parent")
    assert _cond(status, "Reported") is None and "reportUri" not in status


@pytest.mark.parametrize(
    ("report", "phase", "reported", "reason"),
    [
        (None, "Running", "Unknown", "ReportPending"),
        ({"status": {"active": 1}}, "Running", "Unknown", "ReportRunning"),
        (_job("Complete"), "Succeeded", "True", "ReportSucceeded"),
        (_job("Failed"), "Failed", "False", "ReportFailed"),
    ],
)
def test_all_finished_follows_the_report_job(
    report: dict[str, Any] | None, phase: str, reported: str, reason: str
) -> None:
    status = _status(["succeeded", "failed", "succeeded", "succeeded"], report)
    assert status["phase"] == phase
    got = _cond(status, "Reported")
    assert got is not None and (got["status"], got["reason"]) == (reported, reason)
    assert (status["succeeded"], status["failed"], status["pending"]) == (3, 1, 0)
    assert _cond(status, "ArmsSucceeded")["status"] == "True"  # type: ignore[index]
    assert ("reportUri" in status) == (reported == "True")
    if reported == "True":
        assert status["reportUri"] == "runs:/parent/report/"


def test_every_run_of_an_arm_failed_is_failed_naming_the_arm() -> None:
    status = _status(["succeeded", "failed", "succeeded", "failed"], _job("Complete"))
    assert status["phase"] == "Failed"
    arms = _cond(status, "ArmsSucceeded")
    assert arms is not None and arms["status"] == "False" and arms["reason"] == "ArmFailed"
    assert arms["message"] == "every run of arm(s) high failed"
    assert status["reportUri"] == "runs:/parent/report/"  # the report still says what happened


def test_without_mlflow_there_is_no_report_and_the_runs_decide() -> None:
    status = _status(["succeeded"] * 4, run_id="")
    assert status["phase"] == "Succeeded"
    reported = _cond(status, "Reported")
    assert reported is not None and reported["reason"] == "TrackingNotConfigured"
    assert "mlflowParentRunId" not in status and "mlflowRunUrl" not in status


def test_a_name_held_by_a_foreign_experiment_is_not_ready() -> None:
    status = _status([None, None, None, None], foreign=[2])
    ready = _cond(status, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "NameConflict")
    assert "st-low-s1" in ready["message"]
    assert status["pending"] == 4


def test_carried_over_stamped_once_and_unchanged_is_no_patch() -> None:
    tracking = condition("TrackingReady", "True", "RunReady", "MLflow run parent")
    first = _status(["running", None, None, None], conditions=[tracking])
    # The timer recomputes everything but TrackingReady: carried over, same order, same stamps.
    second = _status(["running", None, None, None], current=first, now=LATER)
    assert second == first and status_patch(first, second) is None
    assert [c["type"] for c in first["conditions"]] == ["Ready", "TrackingReady"]
    third = _status(["succeeded", "running", None, None], current=second, now=LATER)
    assert status_patch(second, third) == {"succeeded": 1, "pending": 2}
    done = _status(["succeeded"] * 4, _job("Complete"), current=third, now=LATER)
    patch = status_patch(third, done)
    assert patch is not None and patch["phase"] == "Succeeded"
    stamps = {c["type"]: c["lastTransitionTime"] for c in done["conditions"]}
    assert stamps == {
        "Ready": NOW,
        "TrackingReady": NOW,
        "ArmsSucceeded": LATER,
        "Reported": LATER,
    }
