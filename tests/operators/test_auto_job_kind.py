"""``job_kind: auto`` picks the kind that can carry the spec: an Experiment with
``spec.resources.priority_class`` runs as a PyTorchJob wherever the Training Operator is
installed, even beside Kubeflow Trainer v2; where only the Trainer is, it fails once saying
why neither kind can run it and what to change.

Upstream behaviour relied on, read at the tags: Kubeflow Trainer v2.3.0
``pkg/apis/trainer/v1alpha1/trainjob_types.go`` (``PodSpecPatch``, the only per-TrainJob pod
override, has no ``priorityClassName``; ``Trainer`` none either) and Kueue v0.19.2
``pkg/controller/jobs/trainjob/trainjob_controller.go`` (no ``PriorityClass()``, so
``pkg/controller/jobframework/reconciler.go`` ``ExtractPriority`` reads the WorkloadPriorityClass
label or the runtime's pod templates). The cluster is the handlers' in-memory fake
(``FakeApi``): which kinds it serves is what is under test, not an API server.
"""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from sarl_operator import experiment_handlers, trainjob
from tests.operators.test_handlers import SETTINGS, FakeApi, FakeTracker
from tests.operators.test_trainjob import _body, _created, _reconcile, _with_runtime

PRIORITY = {"priority_class": "research-high"}


def _both() -> FakeApi:
    """Training Operator v1 and Kubeflow Trainer v2 (with the chart's runtime) installed."""
    return _with_runtime(FakeApi(trainer_v2=True))


def _trainer_only() -> FakeApi:
    return _with_runtime(FakeApi(trainer_v2=True, missing_kinds=frozenset({"PyTorchJob"})))


def _pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


def _fail(body: dict[str, Any], api: FakeApi) -> tuple[str, dict[str, Any]]:
    """(the PermanentError's message, the Ready condition written)."""
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.PermanentError) as raised:
        experiment_handlers.reconcile(
            body, patch, api, settings=SETTINGS, post_event=lambda *_: None,
            tracker_factory=lambda _uri: FakeTracker(),
        )  # fmt: skip
    ready = {c["type"]: c for c in patch["status"]["conditions"]}["Ready"]
    return str(raised.value), ready


def test_auto_with_a_priority_class_runs_a_pytorchjob_beside_the_trainer() -> None:
    api = _both()
    body = _body(PRIORITY)
    patch = _reconcile(body, api)
    assert _created(api) == ["PyTorchJob"]
    assert patch["status"]["jobKind"] == "PyTorchJob"
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", "research", body["metadata"]["name"])]
    assert [p["priorityClassName"] for p in _pods(job)] == ["research-high"] * 2


def test_auto_without_a_priority_class_still_prefers_the_trainjob() -> None:
    api = _both()
    assert _reconcile(_body(), api)["status"]["jobKind"] == "TrainJob"
    assert _created(api) == ["TrainJob"]


def test_auto_with_a_priority_class_and_only_the_trainer_says_why_neither_kind_fits() -> None:
    api = _trainer_only()
    message, ready = _fail(_body(PRIORITY), api)
    assert _created(api) == []
    assert ready["reason"] == "InvalidSpec" and ready["message"] == message
    for part in (
        "spec.resources.priority_class='research-high'",
        "cannot set its pods' priorityClassName",
        "job_kind auto chose TrainJob because this cluster serves no PyTorchJob",
        "install the Kubeflow Training Operator",
        "or unset spec.resources.priority_class",
    ):
        assert part in message


def test_auto_with_a_priority_class_and_no_job_kind_offers_only_the_training_operator() -> None:
    """Installing the Trainer would not run it: the message says so instead of offering it."""
    api = FakeApi(missing_kinds=frozenset({"PyTorchJob"}))
    message, ready = _fail(_body(PRIORITY), api)
    assert ready["reason"] == "PyTorchJobUnavailable"
    assert "install the Kubeflow Training Operator" in message
    assert "the Kubeflow Trainer would not do: spec.resources.priority_class" in message
    assert "; or Kubeflow Trainer" not in message


@pytest.mark.parametrize(
    ("served", "priority", "kind"),
    [
        (("TrainJob", "PyTorchJob"), None, "TrainJob"),
        (("TrainJob", "PyTorchJob"), "research-high", "PyTorchJob"),
        (("PyTorchJob",), "research-high", "PyTorchJob"),
        (("TrainJob",), None, "TrainJob"),
        (("TrainJob",), "research-high", "TrainJob"),  # no other: its builder says why
        ((), "research-high", "PyTorchJob"),  # none: MissingApiError names what to install
    ],
)
def test_auto_job_kind(served: tuple[str, ...], priority: str | None, kind: str) -> None:
    exp = experiment_handlers.experiment_from_body(_body({"priority_class": priority}))
    assert experiment_handlers.auto_job_kind(exp, served) == kind
    assert bool(trainjob.cannot_carry(exp)) == bool(priority)
