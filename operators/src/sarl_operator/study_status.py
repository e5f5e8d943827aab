"""Pure status logic of a Study: run counts, phase and conditions from its runs and report Job.

Called by ``study_handlers`` and tested directly. The fields are those of the Study CRD
(charts/sarl-platform/crds/studies.sarl.dev.yaml, generated from
``sarl.schemas.generate.StudyStatus``); patches are computed with
:func:`sarl_operator.status.status_patch`, so an unchanged status is never written.

Phase: ``Pending`` until a run has started; ``Running`` while a run or the report is not
finished; once every run has finished and the report Job succeeded, ``Succeeded`` — or
``Failed`` when every run of some arm failed (condition ``ArmsSucceeded=False`` names the arms:
that arm has nothing to compare). ``Failed`` also when the report Job fails (``Reported=False``)
or the spec is invalid (``Ready=False``, see :func:`sarl_operator.status.failed_status`). Without
MLflow there is no parent run and no report (``Reported=False``, ``TrackingNotConfigured``); the
phase then follows the runs alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sarl_operator.status import batch_job_condition, condition, stamped
from sarl_operator.study_builders import RunState, report_uri

#: The Study's conditions, in the order the status lists them (all written by the operator;
#: an Event on each transition).
CONDITION_ORDER: Final = ("Ready", "TrackingReady", "InferenceReady", "ArmsSucceeded", "Reported")
STUDY_CONDITIONS: Final = frozenset(CONDITION_ORDER)


@dataclass(frozen=True)
class Counts:
    """Runs by outcome (``pending``: no Experiment yet, or not started)."""

    total: int
    pending: int
    running: int
    succeeded: int
    failed: int

    @classmethod
    def of(cls, states: Sequence[RunState]) -> Counts:
        outcomes = [s.outcome for s in states]
        return cls(
            total=len(outcomes),
            pending=outcomes.count("pending"),
            running=outcomes.count("running"),
            succeeded=outcomes.count("succeeded"),
            failed=outcomes.count("failed"),
        )


def failed_arms(states: Sequence[RunState]) -> list[str]:
    """Arms (in spec order) every run of which failed."""
    arms: dict[str, list[str]] = {}
    for s in states:
        arms.setdefault(s.run.arm, []).append(s.outcome)
    return [arm for arm, outs in arms.items() if all(o == "failed" for o in outs)]


def ready_condition(states: Sequence[RunState]) -> dict[str, Any]:
    """``Ready``: the spec is valid; False (``NameConflict``) while an Experiment that this
    Study does not control holds the name of one of its runs (it is left alone; the run is
    created once that name is free)."""
    taken = [s.run.name for s in states if s.foreign]
    if taken:
        message = f"Experiment(s) {', '.join(taken)} exist and are not owned by this Study"
        return condition("Ready", "False", "NameConflict", message)
    return condition("Ready", "True", "SpecValid")


def _runs_phase(counts: Counts) -> str:
    started = counts.running + counts.succeeded + counts.failed
    return "Running" if started else "Pending"


def desired_status(
    states: Sequence[RunState],
    *,
    study_name: str,
    generation: int | None,
    report_job: Mapping[str, Any] | None,
    parent_run_id: str,
    run_url: str,
    conditions: Sequence[Mapping[str, Any]] = (),
    current: Mapping[str, Any] | None = None,
    now: str = "",
) -> dict[str, Any]:
    """The status the Study should show.

    ``report_job`` is the ``<study>-report`` Job (None: not created); ``parent_run_id`` empty:
    no MLflow, no report. ``conditions`` are the ones the caller computed (``TrackingReady`` at
    reconcile); the Study's other conditions of ``current`` that are not recomputed here are
    carried over.
    """
    counts = Counts.of(states)
    own = [ready_condition(states), *conditions]
    phase = _runs_phase(counts)
    uri = ""
    if states and all(s.finished for s in states):
        lost = failed_arms(states)
        if lost:
            message = f"every run of arm(s) {', '.join(lost)} failed"
            own.append(condition("ArmsSucceeded", "False", "ArmFailed", message))
        else:
            own.append(condition("ArmsSucceeded", "True", "EveryArmSucceeded"))
        if parent_run_id:
            failed = f"report Job {study_name}-report failed"
            reported = batch_job_condition(report_job, "Reported", "Report", failed)
        else:
            message = "no MLflow tracking URI: no parent run to report"
            reported = condition("Reported", "False", "TrackingNotConfigured", message)
        own.append(reported)
        if reported["status"] == "True":
            uri = report_uri(parent_run_id)
        if reported["status"] == "Unknown":
            phase = "Running"
        elif reported["reason"] == "ReportFailed" or lost:
            phase = "Failed"
        else:
            phase = "Succeeded"
    current_conditions = list((current or {}).get("conditions") or [])
    own_types = {c["type"] for c in own}
    carried = [
        c
        for c in current_conditions
        if c.get("type") in STUDY_CONDITIONS and c.get("type") not in own_types
    ]
    out: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": generation,
        # One fixed order, so that whichever writer computed which condition, an unchanged
        # status compares equal.
        "conditions": sorted(
            [*carried, *stamped(own, current_conditions, now)],
            key=lambda c: CONDITION_ORDER.index(c["type"]),
        ),
        "total": counts.total,
        "pending": counts.pending,
        "running": counts.running,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
    }
    if parent_run_id:
        out["mlflowParentRunId"] = parent_run_id
    if run_url:
        out["mlflowRunUrl"] = run_url
    if uri:
        out["reportUri"] = uri
    return out
