"""Study handlers called directly, with the in-memory fake Kubernetes API of test_handlers.py.

No real Kubernetes API server can run here: :class:`FakeApi` is a dict of objects (no
controllers, no garbage collector), the test plays the Experiment handlers by writing a child's
``status.phase``, and MLflow is a fake :class:`Tracker` that records calls or fails. The whole
operator (kopf, HTTP to kmock's emulated API server, a real MLflow server) runs in
``test_study_operator.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kopf
import pytest

from sarl.spec.loader import load_study
from sarl.spec.study import Study, StudyRun
from sarl_operator import study_handlers
from sarl_operator.reconcile import TRACKING_DOWN, TRACKING_RETRY_DELAY_S, Settings
from sarl_operator.tracking import Progress, RunRef, TrackingError
from tests.operators.cases import IMAGE, NAMESPACE, PLATFORM
from tests.operators.study_cases import small_doc
from tests.operators.test_handlers import FakeApi

UID = "study-uid-1"
SETTINGS = Settings(
    verl_image=IMAGE,
    platform=PLATFORM,
    tracking_uri="http://mlflow:5000",
    ui_url="https://mlflow.example.com",
)
EXPERIMENT = ("sarl.dev/v1alpha1", "Experiment")
STUDY = ("sarl.dev/v1alpha1", "Study")


class StudyTracker:
    """Records ensure_run calls (name and keywords); fails with TrackingError when ``down``."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def ensure_run(self, experiment_name: str, **kwargs: Any) -> RunRef:
        self.calls.append((experiment_name, kwargs))
        if self.down:
            raise TrackingError("MLflow http://mlflow/api: ConnectError (after 3 attempts)")
        return RunRef(run_id="parent-1", experiment_id="7")

    def latest_progress(self, run_id: str) -> Progress | None:
        return None


class Harness:
    """A Study held by the fake API (``body`` is kopf's copy of it, which reconcile gets and
    the test may edit), the events, the tracker. kopf's patches are applied to both."""

    def __init__(self, doc: dict[str, Any], tracker: StudyTracker | None = None) -> None:
        self.body: dict[str, Any] = {
            "apiVersion": doc["apiVersion"],
            "kind": doc["kind"],
            "metadata": {
                "name": doc["metadata"]["name"],
                "namespace": NAMESPACE,
                "uid": UID,
                "generation": 1,
            },
            "spec": doc["spec"],
        }
        self.api = FakeApi()
        self.key = (*STUDY, NAMESPACE, doc["metadata"]["name"])
        self.api.objects[self.key] = copy.deepcopy(self.body)
        self.events: list[tuple[str, ...]] = []
        self.tracker = tracker or StudyTracker()

    def _post(self, _obj: Mapping[str, Any], *event: str) -> None:
        self.events.append(event)

    def _apply(self, patch: dict[str, Any]) -> dict[str, Any]:
        """What kopf does with the patch: an unguarded merge patch of the Study's status."""
        if patch.get("status"):
            self.api.put_status(self.key, patch["status"])
        self.body["status"] = {**(self.body.get("status") or {}), **patch.get("status", {})}
        return patch

    def reconcile(self, settings: Settings = SETTINGS) -> dict[str, Any]:
        patch: dict[str, Any] = {}
        try:
            study_handlers.reconcile(
                self.body,
                patch,
                self.api,
                settings=settings,
                post_event=self._post,
                tracker_factory=lambda _uri: self.tracker,
            )
        finally:
            self._apply(patch)
        return patch

    def refresh(self, settings: Settings = SETTINGS, body: Mapping[str, Any] | None = None) -> None:
        """A timer tick given kopf's copy ``body`` (default: :attr:`body`, which the API server
        then holds too: the test's edits of it)."""
        if body is None:
            self.api.objects[self.key] = copy.deepcopy(self.body)
        patch: dict[str, Any] = {}
        study_handlers.refresh(
            copy.deepcopy(dict(body or self.body)),
            patch,
            self.api,
            settings=settings,
            post_event=self._post,
        )
        if patch.get("status"):
            self.api.put_status(self.key, patch["status"])
        self.body = copy.deepcopy(self.api.objects[self.key])

    def experiments(self) -> dict[str, dict[str, Any]]:
        return {k[3]: v for k, v in self.api.objects.items() if k[:2] == EXPERIMENT}

    def set_phase(self, name: str, phase: str) -> None:
        """What the Experiment handlers would write on the child."""
        self.api.objects[(*EXPERIMENT, NAMESPACE, name)]["status"] = {"phase": phase}

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})


def _counts(status: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(status[k] for k in ("total", "pending", "running", "succeeded", "failed"))


def test_fan_out_two_arms_two_seeds_owned_labelled_and_nested_under_the_parent_run() -> None:
    """2 arms x 2 seeds -> 4 owned Experiments under one parent run (Kubernetes API: an
    in-memory fake, no real cluster here)."""
    h = Harness(small_doc("fan"))
    h.reconcile()
    children = h.experiments()
    assert sorted(children) == ["fan-high-s0", "fan-high-s1", "fan-low-s0", "fan-low-s1"]
    for name, obj in children.items():
        ref = obj["metadata"]["ownerReferences"]
        assert ref == [
            {
                "apiVersion": "sarl.dev/v1alpha1",
                "kind": "Study",
                "name": "fan",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        labels = obj["metadata"]["labels"]
        assert name == f"fan-{labels['sarl.dev/arm']}-s{labels['sarl.dev/seed']}"
        assert obj["spec"]["tracking"]["tags"]["mlflow.parentRunId"] == "parent-1"
    ((experiment, kwargs),) = h.tracker.calls
    assert experiment == "fan" and kwargs["uid"] == UID and kwargs["run_name"] == "fan"
    assert kwargs["tags"] == {
        "mlflow.runColor": "#999999",  # grey: the arms have the colours (issue 40 item 4)
        "sarl.role": "study",
        "sarl.study": "fan",
    }
    status = h.status
    assert status["mlflowParentRunId"] == "parent-1"
    assert status["mlflowRunUrl"] == (
        "https://mlflow.example.com/#/experiments/7/runs/parent-1?workflowType=machine_learning"
    )
    assert (status["phase"], _counts(status)) == ("Pending", (4, 4, 0, 0, 0))
    assert ("create", "ConfigMap") in h.api.writes
    created = [e for e in h.events if e[1] == "Created"]
    assert len(created) == 5  # the ConfigMap and 4 Experiments
    assert ("Normal", "PhasePending", "phase None -> Pending") in h.events


def test_parallelism_one_creates_the_next_run_once_the_first_finished() -> None:
    """Only one run exists until it is marked Succeeded, then the next is created (Kubernetes
    API: an in-memory fake; the test writes the child's phase as the Experiment handlers would)."""
    h = Harness(small_doc("par", seeds=1, parallelism=1))
    h.reconcile()
    assert list(h.experiments()) == ["par-low-s0"]
    h.refresh()
    h.set_phase("par-low-s0", "Running")
    h.refresh()
    assert list(h.experiments()) == ["par-low-s0"]
    assert (h.status["phase"], _counts(h.status)) == ("Running", (2, 1, 1, 0, 0))
    h.set_phase("par-low-s0", "Succeeded")
    h.refresh()
    assert sorted(h.experiments()) == ["par-high-s0", "par-low-s0"]
    assert _counts(h.status) == (2, 1, 0, 1, 0)
    assert ("Normal", "Created", "created Experiment par-high-s0") in h.events


def test_running_twice_or_after_a_restart_creates_nothing_twice() -> None:
    """Re-running the handler, or a restart that lost the status, creates nothing twice and
    keeps the parent run (Kubernetes API: an in-memory fake, no real cluster here)."""
    h = Harness(small_doc("again", parallelism=2))
    h.reconcile()
    h.reconcile()  # kopf re-runs it (resume, update): the status holds the parent run
    h.refresh()
    assert len(h.tracker.calls) == 1
    assert sorted(h.experiments()) == ["again-high-s0", "again-low-s0"]
    assert h.api.writes.count(("create", "Experiment")) == 2
    # A restarted operator whose status write was lost: the parent run is looked up again (by
    # the Study's uid, see tracking.ensure_run), the children are found by name.
    h.body.pop("status")
    h.reconcile()
    assert len(h.tracker.calls) == 2 and h.status["mlflowParentRunId"] == "parent-1"
    assert h.api.writes.count(("create", "Experiment")) == 2


def test_all_finished_creates_the_report_job_once_and_succeeds_with_it() -> None:
    """The report Job comes once every run finished, once; its success ends the Study
    (Kubernetes API: an in-memory fake; the test plays the Job controller)."""
    h = Harness(small_doc("rep"))
    h.reconcile()
    for name in ("rep-low-s0", "rep-high-s0", "rep-low-s1"):
        h.set_phase(name, "Succeeded")
    h.refresh()
    assert ("create", "Job") not in h.api.writes  # one run is still pending
    h.set_phase("rep-high-s1", "Failed")
    for _ in range(2):
        h.refresh()
    assert h.api.writes.count(("create", "Job")) == 1
    job = h.api.objects[("batch/v1", "Job", NAMESPACE, "rep-report")]
    assert job["metadata"]["ownerReferences"][0]["uid"] == UID
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["MLFLOW_RUN_ID"] == "parent-1"
    assert (h.status["phase"], _counts(h.status)) == ("Running", (4, 0, 0, 3, 1))
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    h.refresh()
    assert h.status["phase"] == "Succeeded" and h.status["reportUri"] == "runs:/parent-1/report/"
    assert ("Normal", "PhaseSucceeded", "phase Running -> Succeeded") in h.events


def test_a_failed_report_job_fails_the_study_with_a_condition() -> None:
    """Kubernetes API: an in-memory fake; the test plays the Job controller."""
    h = Harness(small_doc("repfail", seeds=1))
    h.reconcile()
    for name in h.experiments():
        h.set_phase(name, "Succeeded")
    h.refresh()
    job = h.api.objects[("batch/v1", "Job", NAMESPACE, "repfail-report")]
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    h.refresh()
    assert h.status["phase"] == "Failed"
    reported = next(c for c in h.status["conditions"] if c["type"] == "Reported")
    assert (reported["status"], reported["reason"]) == ("False", "ReportFailed")
    assert "repfail-report" in reported["message"]
    assert ("Warning", "ReportFailed") in [e[:2] for e in h.events]


def test_invalid_study_is_failed_naming_the_field_and_creates_nothing() -> None:
    """Kubernetes API: an in-memory fake, no real cluster here."""
    doc = small_doc("bad")
    doc["spec"]["arms"][1]["override"] = {"algorithm": {"learning_rate": -1}}
    h = Harness(doc)
    with pytest.raises(kopf.PermanentError, match=r"spec\.arms\[1\]\.override\.algorithm"):
        h.reconcile()
    assert h.api.writes == [] and h.tracker.calls == []
    assert h.status["phase"] == "Failed"
    ready = h.status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert "spec.arms[1].override.algorithm.learning_rate" in ready["message"]
    assert h.events[0][:2] == ("Warning", "PhaseFailed")
    h.refresh()  # the timer leaves an invalid Study alone
    assert h.api.writes == []


def test_an_arm_the_trainer_refuses_is_failed_naming_the_arm() -> None:
    """verl cannot give a reward the policy's hidden states: the Experiment's reconcile would
    refuse it, so the Study does (Kubernetes API: an in-memory fake, no real cluster here)."""
    doc = small_doc("refused")
    doc["spec"]["arms"][1]["override"]["reward"] = [
        {"name": "structure", "settings": {"embedder": {"kind": "policy"}}},
        {"name": "ground_truth", "weight": 0.5},
    ]
    h = Harness(doc)
    with pytest.raises(
        kopf.PermanentError, match=r"spec\.arms\[1\] \(high, seed 0\): spec\.reward\[0\]"
    ):
        h.reconcile()
    assert h.api.writes == [] and h.status["phase"] == "Failed"


def test_mlflow_down_is_temporary_and_creates_no_run() -> None:
    """Kubernetes API: an in-memory fake; MLflow: a fake that fails."""
    h = Harness(small_doc("down"), StudyTracker(down=True))
    with pytest.raises(kopf.TemporaryError) as err:
        h.reconcile()
    assert err.value.delay == TRACKING_RETRY_DELAY_S
    assert h.api.writes == []
    tracking = next(c for c in h.status["conditions"] if c["type"] == "TrackingReady")
    # A fixed text: the server's errors and replies stay in the operator's log (issue 36).
    assert tracking["status"] == "False" and tracking["message"] == TRACKING_DOWN
    h.refresh()  # the timer waits for reconcile to get the parent run
    assert h.api.writes == []


def test_without_mlflow_runs_start_without_a_parent_and_no_report_is_made() -> None:
    """Kubernetes API: an in-memory fake, no real cluster here."""
    settings = Settings(verl_image=IMAGE, platform=PLATFORM)
    h = Harness(small_doc("nomlflow", seeds=1))
    h.reconcile(settings)
    assert h.tracker.calls == []
    for obj in h.experiments().values():
        assert "mlflow.parentRunId" not in obj["spec"]["tracking"]["tags"]
    for name in h.experiments():
        h.set_phase(name, "Succeeded")
    h.refresh(settings)
    assert ("create", "Job") not in h.api.writes
    assert h.status["phase"] == "Succeeded"


def test_an_experiment_of_the_same_name_not_owned_is_left_alone() -> None:
    """Kubernetes API: an in-memory fake, no real cluster here."""
    h = Harness(small_doc("taken", seeds=1))
    foreign = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "taken-low-s0", "namespace": NAMESPACE},
        "spec": {},
    }
    h.api.objects[(*EXPERIMENT, NAMESPACE, "taken-low-s0")] = copy.deepcopy(foreign)
    h.reconcile()
    assert h.api.objects[(*EXPERIMENT, NAMESPACE, "taken-low-s0")] == foreign
    assert sorted(h.experiments()) == ["taken-high-s0", "taken-low-s0"]
    ready = next(c for c in h.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NameConflict")
    assert ("Warning", "NameConflict") in [e[:2] for e in h.events]


def test_a_spec_is_validated_and_expanded_once_not_at_every_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Validating a Study expands and checks every arm x seed Experiment (~0.1 s of CPU); one
    operator process ticks every Study it watches each interval, so a tick reuses what its spec
    expanded to and a changed spec is validated once (Kubernetes API: an in-memory fake)."""
    h = Harness(small_doc("once", seeds=2, parallelism=1))
    h.reconcile()
    loads: list[str] = []
    expansions: list[str] = []
    runs = Study.runs

    def counted_load(doc: dict[str, Any]) -> Study:
        loads.append(doc["spec"]["arms"][0]["name"])
        return load_study(doc)

    def counted_runs(self: Study, parent_run_id: str | None = None) -> list[StudyRun]:
        expansions.append(self.name)
        return runs(self, parent_run_id)

    monkeypatch.setattr(study_handlers, "load_study", counted_load)
    monkeypatch.setattr(Study, "runs", counted_runs)
    for _ in range(3):
        h.refresh()
    h.set_phase("once-low-s0", "Succeeded")
    h.refresh()
    assert "once-high-s0" in h.experiments()
    assert (loads, expansions) == ([], [])
    h.body["spec"] = {**h.body["spec"], "arms": [*h.body["spec"]["arms"]][::-1]}
    for _ in range(3):
        h.refresh()
    assert loads == ["high"]


def test_a_tick_on_a_stale_body_keeps_the_condition_reconcile_wrote_since() -> None:
    """kopf hands the timer the body of the last watch event it processed (kopf 1.45.2
    ``_core/engines/daemons.py``, ``DaemonsMemory.live_fresh_body``), which may predate the
    status reconcile has just patched; kopf merge-patches the timer's ``patch``, and the
    ``conditions`` list replaces the whole list. A tick holding the Study as created must keep
    reconcile's ``TrackingReady`` (here False: no MLflow configured), which only reconcile
    computes. Kubernetes API: the in-memory fake."""
    settings = Settings(verl_image=IMAGE, platform=PLATFORM)
    h = Harness(small_doc("stale", seeds=1))
    created = copy.deepcopy(h.body)
    h.reconcile(settings)
    h.set_phase("stale-low-s0", "Running")  # the tick has a count to write
    h.refresh(settings, body=created)
    tracking = next(
        (c for c in h.status.get("conditions") or [] if c["type"] == "TrackingReady"), {}
    )
    assert (tracking.get("status"), tracking.get("reason")) == ("False", "TrackingNotConfigured")
    assert h.status["running"] == 1
    assert ("patch_status", "Study") in h.api.writes
