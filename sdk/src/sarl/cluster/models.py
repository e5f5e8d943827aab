"""Typed views of an Experiment (and a Study) custom object as the cluster reports it.

Built by :mod:`sarl.cluster.client` from the API server's JSON (``metadata`` and ``status``
written by the operator, see charts/sarl-platform/crds/experiments.sarl.dev.yaml and
studies.sarl.dev.yaml); printed by :mod:`sarl.cli.cluster`. Plain frozen dataclasses: reading
them never talks to the cluster.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: Phases after which nothing changes any more.
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
PHASES: Final = ("Pending", "Queued", "Running", "Succeeded", "Failed")


@dataclass(frozen=True)
class Condition:
    """One entry of ``status.conditions`` (shaped like a Kubernetes ``metav1.Condition``)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Condition:
        return cls(
            type=str(doc.get("type") or ""),
            status=str(doc.get("status") or ""),
            reason=str(doc.get("reason") or ""),
            message=str(doc.get("message") or ""),
            last_transition_time=str(doc.get("lastTransitionTime") or ""),
        )


class _PhaseAndConditions:
    """What every kind's status offers on top of its fields (``phase``, ``conditions``)."""

    phase: str
    conditions: tuple[Condition, ...]

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def failure_message(self) -> str:
        """The message of the first ``False``/failed condition that has one, else ``""``."""
        return failure_message(self.conditions)


def _conditions(doc: Mapping[str, Any]) -> tuple[Condition, ...]:
    """``status.conditions`` of a custom object, entries that are not mappings skipped."""
    return tuple(Condition.from_dict(c) for c in doc.get("conditions") or () if isinstance(c, dict))


@dataclass(frozen=True)
class ExperimentStatus(_PhaseAndConditions):
    """``status`` of an Experiment; ``phase`` is ``""`` until the operator has seen it."""

    phase: str = ""
    last_step: int | None = None
    last_reward: float | None = None
    mlflow_run_url: str = ""
    mlflow_run_id: str = ""
    checkpoint_uri: str = ""
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> ExperimentStatus:
        doc = doc or {}
        step, reward, gen = (
            doc.get("lastStep"),
            doc.get("lastReward"),
            doc.get("observedGeneration"),
        )
        return cls(
            phase=str(doc.get("phase") or ""),
            last_step=int(step) if step is not None else None,
            last_reward=float(reward) if reward is not None else None,
            mlflow_run_url=str(doc.get("mlflowRunUrl") or ""),
            mlflow_run_id=str(doc.get("mlflowRunId") or ""),
            checkpoint_uri=str(doc.get("checkpointUri") or ""),
            observed_generation=int(gen) if gen is not None else None,
            conditions=_conditions(doc),
        )

    def summary(self) -> str:
        """``Running, step 12, reward 0.4100`` (what the wait status line shows)."""
        parts = [self.phase or "no phase yet"]
        if self.last_step is not None:
            parts.append(f"step {self.last_step}")
        if self.last_reward is not None:
            parts.append(f"reward {self.last_reward:.4f}")
        return ", ".join(parts)


@dataclass(frozen=True)
class _Identity:
    """What every kind's Info holds from the custom object's ``metadata`` and ``spec``."""

    name: str
    namespace: str
    uid: str = ""
    generation: int | None = None
    created: dt.datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)

    def age(self, now: dt.datetime | None = None) -> str:
        """Age like ``kubectl get``: ``42s``, ``5m``, ``3h``, ``2d``; ``<unknown>`` if unset."""
        return age(self.created, now)


@dataclass(frozen=True)
class ExperimentInfo(_Identity):
    """An Experiment on the cluster: identity, the stored ``spec`` (as JSON) and its status."""

    status: ExperimentStatus = field(default_factory=ExperimentStatus)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ExperimentInfo:
        """From the custom object's JSON as the API server returns it."""
        return cls(**_identity(obj), status=ExperimentStatus.from_dict(obj.get("status")))

    @property
    def phase(self) -> str:
        return self.status.phase


def _count(value: Any) -> int | None:
    return int(value) if value is not None else None


@dataclass(frozen=True)
class StudyStatus(_PhaseAndConditions):
    """``status`` of a Study: its runs by phase, the MLflow parent run, the report."""

    phase: str = ""
    total: int | None = None
    pending: int | None = None
    running: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    mlflow_parent_run_id: str = ""
    mlflow_run_url: str = ""
    report_uri: str = ""
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> StudyStatus:
        doc = doc or {}
        return cls(
            phase=str(doc.get("phase") or ""),
            total=_count(doc.get("total")),
            pending=_count(doc.get("pending")),
            running=_count(doc.get("running")),
            succeeded=_count(doc.get("succeeded")),
            failed=_count(doc.get("failed")),
            mlflow_parent_run_id=str(doc.get("mlflowParentRunId") or ""),
            mlflow_run_url=str(doc.get("mlflowRunUrl") or ""),
            report_uri=str(doc.get("reportUri") or ""),
            observed_generation=_count(doc.get("observedGeneration")),
            conditions=_conditions(doc),
        )

    def summary(self) -> str:
        """``Running, 3/18 succeeded, 1 failed, 2 running, 12 pending`` (the wait status line)."""
        if self.total is None:
            return self.phase or "no phase yet"
        parts = [self.phase or "no phase yet", f"{self.succeeded or 0}/{self.total} succeeded"]
        for count, word in [(self.failed, "failed"), (self.running, "running")]:
            if count:
                parts.append(f"{count} {word}")
        if self.pending:
            parts.append(f"{self.pending} pending")
        return ", ".join(parts)


@dataclass(frozen=True)
class StudyInfo(_Identity):
    """A Study on the cluster: identity, the stored ``spec`` (as JSON) and its status."""

    status: StudyStatus = field(default_factory=StudyStatus)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> StudyInfo:
        """From the custom object's JSON as the API server returns it."""
        return cls(**_identity(obj), status=StudyStatus.from_dict(obj.get("status")))

    @property
    def phase(self) -> str:
        return self.status.phase


def _identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields an Info takes from a custom object's metadata and spec."""
    meta = obj.get("metadata") or {}
    return {
        "name": str(meta.get("name") or ""),
        "namespace": str(meta.get("namespace") or ""),
        "uid": str(meta.get("uid") or ""),
        "generation": _count(meta.get("generation")),
        "created": parse_time(meta.get("creationTimestamp")),
        "labels": dict(meta.get("labels") or {}),
        "spec": dict(obj.get("spec") or {}),
    }


def failure_message(conditions: tuple[Condition, ...]) -> str:
    """The message of the first ``False``/failed condition that has one, else ``""``."""
    for cond in conditions:
        if cond.message and (cond.status == "False" or cond.type == "Failed"):
            return cond.message
    return ""


def age(created: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """Age like ``kubectl get``: ``42s``, ``5m``, ``3h``, ``2d``; ``<unknown>`` if unset."""
    if created is None:
        return "<unknown>"
    now = now or dt.datetime.now(dt.UTC)
    return format_duration((now - created).total_seconds())


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 timestamp (``2025-01-02T03:04:05Z``) as an aware datetime, else None."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def format_duration(seconds: float) -> str:
    """``42s``, ``5m``, ``3h``, ``2d`` (negative clock skew shows as ``0s``)."""
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    if s < 2 * 3600:
        return f"{s // 60}m"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"
