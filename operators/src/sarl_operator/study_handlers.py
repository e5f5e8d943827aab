"""The Study's reconcile and timer (``studies.sarl.dev``): its arm x seed Experiments, parent run
and report.

Registered with kopf by :mod:`sarl_operator.handlers` (``on_study``, ``on_study_timer``); the
plumbing it shares with the Experiment's handlers is :mod:`sarl_operator.reconcile`. On
create/resume/update of the spec, :func:`reconcile`:

1. validates the Study (``load_study``) and every arm x seed Experiment with the checks an
   Experiment's own reconcile makes (``check_cluster``); invalid → status Failed with a condition
   naming the field, and ``kopf.PermanentError``;
2. gets the MLflow parent run (:meth:`~sarl_operator.tracking.MlflowTracking.ensure_run`, found
   by the Study's uid tag, tagged ``sarl.role=study`` and ``sarl.study=<name>``; reused from
   ``status.mlflowParentRunId``). MLflow configured but down → ``TrackingReady=False`` and
   ``kopf.TemporaryError``: no run is created without its parent;
3. applies ConfigMap ``<study>-config`` and :func:`sync`: creates the next arm x seed
   Experiments (at most ``spec.parallelism`` unfinished at once), owned by the Study, whose
   MLflow tags carry the parent run id; the operator's Experiment handlers run each;
   Runs whose served embedders are the same model with the same serving spec share one
   InferenceService ``<study>-emb-<hash>`` (:func:`serve_shared`): applied while an unfinished
   run calls it, a run created only once it is Ready (``InferenceReady``), deleted when no
   unfinished run calls it any more (``InferenceReady=False``, reason ``Released``);
4. once every run has finished, creates Job ``<study>-report`` (once), and patches the status
   (counts, parent run, phase, conditions) when it changed, with Events on transitions.

A timer (``SARL_STATUS_INTERVAL_S``) runs :func:`refresh` (:func:`synced_status`), so the next
runs start as earlier ones finish; it works from the Study as read from the API at that tick and
writes the status only if the Study has not changed since
(:func:`~sarl_operator.reconcile.write_fresh_status`). What a spec expands to (the validated
Study, its arm x seed Experiments, its shared models) is computed once per spec and reused
(:func:`expansion`): validating every run costs ~0.1 s of CPU, and one operator process ticks
every Study and Experiment it watches.
Everything is decided from what exists on the API server, so a re-run or a restarted operator
creates nothing twice. Existing Experiments are never patched: a run keeps the spec it started
with; a spec update only affects runs not created yet. Deletion is left to the garbage collector
(owner references).
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, MutableMapping, Sequence
from typing import Any, Final

from sarl.integrations.cluster import check_cluster
from sarl.plan import check_plan, check_study_plan, store_capacity_from_env
from sarl.spec.experiment import API_VERSION, KIND
from sarl.spec.loader import SpecError, load_study
from sarl.spec.study import Study, StudyRun, parent_run_tags
from sarl.tracking.describe import experiment_description, study_description
from sarl_operator import study_builders, study_status, tenant_mlflow
from sarl_operator.admission import image_violations
from sarl_operator.kube import KubeApi, controlled_by
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform
from sarl_operator.reconcile import (
    GROUP,
    VERSION,
    PostEvent,
    Settings,
    Tracker,
    apply_owned,
    fail,
    now,
    patch_status,
    release_owned,
    tracked_run,
    tracking_unavailable,
    write_fresh_status,
)
from sarl_operator.status import RELEASED, condition, isvc_ready, serving_condition
from sarl_operator.study_builders import RunState, SharedModel
from sarl_operator.tenant_review import refuse_study
from sarl_operator.tenant_specs import as_spec_error
from sarl_operator.tracking import MlflowTracking, RunRef, TrackingError

PLURAL: Final = "studies"
WATCHED: Final = study_status.STUDY_CONDITIONS


#: Expanded Study specs kept (least recently used dropped first): one per Study the operator
#: watches is enough; a spec update adds one.
EXPANSIONS_KEPT: Final = 256


class Expansion:
    """What one Study spec expands to, each part computed on first use and then reused: the
    validated :class:`Study`, its arm x seed runs per parent run id, its shared models per
    namespace and platform. Everything in it is treated as read-only."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[StudyRun, ...]] = {}
        self._models: dict[tuple[str, Platform], tuple[SharedModel, ...]] = {}

    def runs(self, parent_run_id: str = "") -> list[StudyRun]:
        """:meth:`Study.runs` (a new list of the same runs)."""
        with self._lock:
            runs = self._runs.get(parent_run_id)
        if runs is None:
            runs = tuple(self.study.runs(parent_run_id or None))
            with self._lock:
                runs = self._runs.setdefault(parent_run_id, runs)
        return list(runs)

    def models(self, namespace: str, platform: Platform = DEFAULT_PLATFORM) -> list[SharedModel]:
        """:func:`study_builders.shared_models` (raises ValueError as it does)."""
        key = (namespace, platform)
        with self._lock:
            models = self._models.get(key)
        if models is None:
            models = tuple(study_builders.shared_models(self.study, namespace, platform))
            with self._lock:
                models = self._models.setdefault(key, models)
        return list(models)


_LOCK = threading.Lock()
#: Canonical JSON of the Study document -> its expansion (or the SpecError it was refused with).
_BY_DOC: OrderedDict[str, Expansion | SpecError] = OrderedDict()
#: id(study) -> the expansion holding that very Study object (checked with ``is``).
_BY_STUDY: dict[int, Expansion] = {}


def _remember(key: str, value: Expansion | SpecError) -> Expansion | SpecError:
    with _LOCK:
        value = _BY_DOC.setdefault(key, value)
        _BY_DOC.move_to_end(key)
        if isinstance(value, Expansion):
            _BY_STUDY[id(value.study)] = value
        while len(_BY_DOC) > EXPANSIONS_KEPT:
            _, dropped = _BY_DOC.popitem(last=False)
            if isinstance(dropped, Expansion) and _BY_STUDY.get(id(dropped.study)) is dropped:
                del _BY_STUDY[id(dropped.study)]
    return value


def expansion(study: Study) -> Expansion:
    """The expansion of ``study``: the remembered one when ``study`` came from
    :func:`study_from_body`, else a new one (not remembered)."""
    with _LOCK:
        found = _BY_STUDY.get(id(study))
    if found is not None and found.study is study:
        return found
    return Expansion(study)


def _validate(doc: dict[str, Any], namespace: str) -> Expansion:
    study = load_study(doc)
    found = Expansion(study)
    arms = [arm.name for arm in study.spec.arms]
    # The platform store's room (the chart's SARL_STORE_CAPACITY); read per validation, as the
    # handlers read their settings, so a changed chart value applies without a restart.
    capacity = store_capacity_from_env(os.environ)
    try:  # all the runs' checkpoints together, before each run's own share
        check_study_plan(study, capacity)
    except ValueError as e:
        raise SpecError(str(e)) from e
    for run in found.runs():
        try:
            check_cluster(run.experiment)
            check_plan(run.experiment, capacity)
        except ValueError as e:
            index = arms.index(run.arm)
            raise SpecError(f"spec.arms[{index}] ({run.arm}, seed {run.seed}): {e}") from e
    try:  # the shared services' names and models, refused here rather than at every sync
        found.models(namespace)
    except ValueError as e:
        raise SpecError(str(e)) from e
    return found


def study_from_body(body: Mapping[str, Any], platform: Platform = DEFAULT_PLATFORM) -> Study:
    """Validate the custom resource as a Study and every arm x seed Experiment as the trainer
    would (``check_cluster``), within ``platform``'s tenant policy; raises SpecError naming the
    field. Validation is remembered per document, so the timer re-validates nothing."""
    meta = body.get("metadata") or {}
    doc = {
        "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": body.get("kind", study_builders.STUDY_KIND),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": dict(meta.get("labels") or {}),
        },
        "spec": body.get("spec") or {},
    }
    key = json.dumps(doc, sort_keys=True, default=_plain)
    with _LOCK:
        known = _BY_DOC.get(key)
    if known is None:
        try:
            known = _remember(key, _validate(doc, str(meta.get("namespace") or "default")))
        except BaseException as e:  # any: remembered as the SpecError reported (STOPS pass)
            _remember(key, refused := as_spec_error(e))
            raise refused from e
    if isinstance(known, SpecError):
        raise SpecError(str(known))
    refuse_study(known.study, known.runs(), str(meta.get("namespace")), platform)
    return known.study


def _plain(value: Any) -> Any:
    """``json.dumps`` of a mapping that is not a dict (kopf's views); anything else refused."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def ensure_parent_run(
    body: Mapping[str, Any],
    study: Study,
    settings: Settings,
    tracker_factory: Callable[[str], Tracker],
) -> tuple[str, str, dict[str, Any]]:
    """(parent run id, its URL, TrackingReady condition); raises TrackingError when MLflow fails.

    Found by the Study's uid tag (or created) in the Study's MLflow experiment, the one its runs
    log to (under tenancy ``<ns>/<name>``, as the tenant's MLflow user: ``tenant_mlflow``); a
    run id already in the status is reused without calling MLflow."""
    namespace = body["metadata"]["namespace"]
    base = study_builders.base_experiment(study, namespace)
    experiment = tenant_mlflow.scoped_name(study.mlflow_experiment, namespace, settings.platform)

    def ensure(tracker: Tracker, meta: Mapping[str, Any]) -> RunRef:
        tags = {**study.spec.base.tracking.tags, **parent_run_tags(study.name)}
        return tracker.ensure_run(
            experiment,
            run_name=study.name,
            namespace=meta["namespace"],
            uid=meta["uid"],
            tags=tags,
            description=study_description(study),
            experiment_description=experiment_description(experiment, study),
        )

    return tracked_run(
        body,
        base,
        settings,
        tracker_factory,
        ensure,
        id_field="mlflowParentRunId",
        uri_field="spec.base.tracking.mlflow_uri",
    )


def observe(api: KubeApi, study: Study, body: Mapping[str, Any], run_id: str) -> list[RunState]:
    """The state of every arm x seed run, read from its Experiment on the API server."""
    meta = body["metadata"]
    return [
        study_builders.run_state(
            run, api.get(API_VERSION, KIND, meta["namespace"], run.name), meta["uid"]
        )
        for run in expansion(study).runs(run_id)
    ]


def serve_shared(
    body: Mapping[str, Any],
    api: KubeApi,
    models: Sequence[SharedModel],
    states: Sequence[RunState],
    post_event: PostEvent,
) -> tuple[set[str], dict[str, Any] | None]:
    """Apply each shared model a run still needs (:func:`study_builders.needed`), delete the
    others this Study controls; (names of the ready ones, the ``InferenceReady`` condition,
    None when the Study serves nothing)."""
    if not models:
        return set(), None
    meta = body["metadata"]
    ready, waiting, serving = set(), [], []
    for model in models:
        current = api.get(
            model.isvc["apiVersion"], "InferenceService", meta["namespace"], model.name
        )
        if not study_builders.needed(model, states):
            version = model.isvc["apiVersion"]
            release_owned(api, body, version, "InferenceService", model.name, current, post_event)
            continue
        serving.append(model.name)
        # Created, never patched: its name is a hash of its spec, so an existing one is current.
        if current is None:
            apply_owned(api, model.isvc, body, post_event, study_builders.STUDY_KIND, create=True)
            ok, why = False, "created"
        elif not controlled_by(current, meta["uid"]):
            ok, why = False, "exists and is not this Study's; waiting for it to be deleted"
        else:
            ok, why = isvc_ready(current)
        if ok:
            ready.add(model.name)
        else:
            waiting.append(f"{model.name}: {why}")
    inference = serving_condition(waiting, serving)
    if inference is not None:
        return ready, inference
    message = "no unfinished run calls " + ", ".join(m.name for m in models) + ": deleted"
    return ready, condition("InferenceReady", "False", RELEASED, message)


def _create_runs(
    body: Mapping[str, Any],
    api: KubeApi,
    study: Study,
    states: list[RunState],
    post_event: PostEvent,
    models: Sequence[SharedModel] = (),
    ready: Collection[str] = (),
) -> list[RunState]:
    """Create the Experiments :func:`study_builders.to_create` picks whose shared models are
    Ready (a run would fail its first reward batch on a service not serving yet; it is created
    by a later sync); the states updated."""
    meta = body["metadata"]
    urls = study_builders.embedding_urls(models)
    waits = {run for m in models if m.name not in ready for run in m.runs}
    picked = study_builders.to_create(states, study.spec.parallelism)
    created = {run.name for run in picked if run.name not in waits}
    for run in (s.run for s in states if s.run.name in created):
        obj = study_builders.experiment_object(run, meta["namespace"], urls.get(run.name, ""))
        apply_owned(api, obj, body, post_event, study_builders.STUDY_KIND, create=True)
    return [RunState(s.run, exists=True) if s.run.name in created else s for s in states]


def _report(
    body: Mapping[str, Any],
    api: KubeApi,
    study: Study,
    settings: Settings,
    run_id: str,
    post_event: PostEvent,
) -> dict[str, Any] | None:
    """The ``<study>-report`` Job, created if missing (never patched: a Job's template is
    immutable)."""
    namespace = body["metadata"]["namespace"]
    name = study_builders.report_name(study)
    job = api.get("batch/v1", "Job", namespace, name)
    if job is None:
        base = study_builders.base_experiment(study, namespace)
        job = study_builders.report_job(
            study,
            namespace,
            image=settings.image_of(base),
            parent_run_id=run_id,
            tracking_uri=settings.tracking_uri_of(base),
            platform=settings.platform,
        )
        apply_owned(api, job, body, post_event, study_builders.STUDY_KIND, create=True)
    return job


def sync(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    api: KubeApi,
    *,
    study: Study,
    settings: Settings,
    post_event: PostEvent,
    run_id: str,
    run_url: str,
    conditions: Sequence[Mapping[str, Any]] = (),
    create: bool = True,
) -> None:
    """Reconcile's sync: :func:`synced_status` put into kopf's ``patch`` when it changed, with
    an Event per transition (:func:`~sarl_operator.reconcile.patch_status`)."""
    desired = synced_status(
        body,
        api,
        study=study,
        settings=settings,
        post_event=post_event,
        run_id=run_id,
        run_url=run_url,
        conditions=conditions,
        create=create,
    )
    patch_status(body, patch, desired, post_event, WATCHED)


def synced_status(
    body: Mapping[str, Any],
    api: KubeApi,
    *,
    study: Study,
    settings: Settings,
    post_event: PostEvent,
    run_id: str,
    run_url: str,
    conditions: Sequence[Mapping[str, Any]] = (),
    create: bool = True,
) -> dict[str, Any]:
    """Read the runs; create the next ones and, once all finished, the report (``create``
    False: only read, as while MLflow is down); the status the Study should show (the
    conditions of ``body``'s status not computed here are carried over)."""
    states = observe(api, study, body, run_id)
    report = None
    own = list(conditions)
    if create:
        models = expansion(study).models(body["metadata"]["namespace"], settings.platform)
        ready, inference = serve_shared(body, api, models, states, post_event)
        if inference is not None:
            own.append(inference)
        states = _create_runs(body, api, study, states, post_event, models, ready)
        if run_id and all(s.finished for s in states):
            report = _report(body, api, study, settings, run_id, post_event)
    return study_status.desired_status(
        states,
        study_name=study.name,
        generation=body["metadata"].get("generation"),
        report_job=report,
        parent_run_id=run_id,
        run_url=run_url,
        conditions=own,
        current=body.get("status") or {},
        now=now(),
    )


def reconcile(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    api: KubeApi,
    *,
    settings: Settings,
    post_event: PostEvent,
    tracker_factory: Callable[[str], Tracker] = MlflowTracking,
) -> None:
    """Validate, get the parent run, apply the ConfigMap, create runs, patch the status."""
    meta = body["metadata"]
    tracker_factory = tenant_mlflow.authenticated(tracker_factory, api, meta["namespace"], settings)
    try:
        study = study_from_body(body, settings.platform)
        # The admission webhook refuses these first; this holds when it is off or was bypassed.
        refused = image_violations(body, settings.allowed_registries)
        if refused:
            raise ValueError("; ".join(refused))
    except BaseException as e:  # any: a tenant's spec never stops the operator (STOPS pass)
        # kopf logs the message; the status shows it.
        raise fail(body, patch, post_event, str(as_spec_error(e)), watched=WATCHED) from e
    # MLflow down: the last parent run of the status, and only read (nothing is created
    # without its parent run); else the run just got, and the next runs created.
    synced = functools.partial(
        sync, body, patch, api, study=study, settings=settings, post_event=post_event
    )
    status = body.get("status") or {}
    try:
        run_id, url, tracking = ensure_parent_run(body, study, settings, tracker_factory)
    except TrackingError as e:
        down, retry = tracking_unavailable(e)
        synced(
            run_id=str(status.get("mlflowParentRunId") or ""),
            run_url=str(status.get("mlflowRunUrl") or ""),
            conditions=[down],
            create=False,
        )
        raise retry from e
    config = study_builders.configmap(study, meta["namespace"])
    apply_owned(api, config, body, post_event, study_builders.STUDY_KIND)
    synced(run_id=run_id, run_url=url, conditions=[tracking])


def refresh(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    api: KubeApi,
    *,
    settings: Settings,
    post_event: PostEvent,
) -> None:
    """The timer's work: :func:`synced_status` with the parent run of the status, computed from
    the Study as read from the API at this tick and written guarded by its resourceVersion
    (:func:`~sarl_operator.reconcile.write_fresh_status`: kopf's ``body`` may predate what
    reconcile just wrote, such as ``TrackingReady``; kopf's ``patch`` is left empty). Nothing
    for an invalid Study (reported once by :func:`reconcile`) or one whose parent run
    :func:`reconcile` has not got yet (it retries that itself)."""

    def desired_of(fresh: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            study = study_from_body(fresh, settings.platform)
        except (SpecError, ValueError):
            return None
        status = fresh.get("status") or {}
        run_id = str(status.get("mlflowParentRunId") or "")
        base = study_builders.base_experiment(study, fresh["metadata"]["namespace"])
        if not run_id and settings.tracking_uri_of(base):
            return None
        return synced_status(
            fresh,
            api,
            study=study,
            settings=settings,
            post_event=post_event,
            run_id=run_id,
            run_url=str(status.get("mlflowRunUrl") or ""),
        )

    write_fresh_status(body, api, study_builders.STUDY_KIND, desired_of, post_event, WATCHED)
