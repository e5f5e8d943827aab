"""The reconcile layer both kinds share: process settings, the MLflow run, owned children, and
the status write with an Event per transition: through kopf's patch for the reconcile handlers
(:func:`patch_status`), guarded by the resourceVersion read for the status timers
(:func:`write_fresh_status`).

Used by :mod:`sarl_operator.experiment_handlers` and :mod:`sarl_operator.study_handlers`, which
do not import each other; :mod:`sarl_operator.handlers` registers both with kopf. Everything
here takes the Kubernetes API, kopf's patch and an Event poster (:data:`PostEvent`) as
arguments, so tests call the handlers with fakes. What kopf gets back on failure:
:func:`fail` (the object Failed, ``kopf.PermanentError``: no retries) and
:func:`tracking_unavailable` (``TrackingReady=False``, ``kopf.TemporaryError`` every
:data:`TRACKING_RETRY_DELAY_S` s: nothing is created without its MLflow run).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import kopf

import sarl
from sarl.spec.experiment import Experiment
from sarl_operator import child_meta, job_pods, scheduling
from sarl_operator.admission import allowed_registries
from sarl_operator.kube import KubeApi, VersionConflictError, apply, controlled_by
from sarl_operator.platform_settings import Platform
from sarl_operator.status import (
    OPERATOR_CONDITIONS,
    RELEASED,
    condition,
    failed_status,
    status_patch,
)
from sarl_operator.tracking import Progress, RunRef, TrackingError, run_url

log = logging.getLogger(__name__)

GROUP: Final = "sarl.dev"
VERSION: Final = "v1alpha1"
DEFAULT_STATUS_INTERVAL_S: Final = 30.0
TRACKING_RETRY_DELAY_S: Final = 30
#: The status's and Event's words when MLflow fails: fixed, never the server's reply.
TRACKING_DOWN: Final = (
    f"MLflow did not answer; retrying every {TRACKING_RETRY_DELAY_S} s "
    "(the operator's log has the cause)"
)
#: Reads and guarded writes a status tick makes before leaving the status to the next tick,
#: when every write finds the object changed since it was read (:func:`write_fresh_status`).
STATUS_WRITE_TRIES: Final = 3
#: Seconds between checks while waiting for a Secret, InferenceServices or a previous child
#: (``SARL_RETRY_DELAY_S``).
WAIT_RETRY_DELAY_S: Final = 30.0
#: Trainer images when the environment names none (the chart always does, by digest once the
#: release workflow pinned them): this release's tag, never ``latest`` — a moving tag would run
#: whatever was pushed last, and a node's cached ``latest`` may differ from the registry's.
DEFAULT_IMAGES: Final[Mapping[str, str]] = {
    "verl": f"ghcr.io/sarl-dev/sarl-verl:{sarl.__version__}",
    "trl": f"ghcr.io/sarl-dev/sarl-trl:{sarl.__version__}",
}

#: (involved object, type "Normal"/"Warning", reason, message) -> None
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]


class Tracker(Protocol):
    """What the handlers use of :class:`~sarl_operator.tracking.MlflowTracking`."""

    def ensure_run(
        self,
        experiment_name: str,
        *,
        run_name: str,
        namespace: str,
        uid: str,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        description: str | None = None,
        experiment_description: str | None = None,
    ) -> RunRef: ...

    def latest_progress(self, run_id: str) -> Progress | None: ...


@dataclass(frozen=True)
class Settings:
    """The operator's process settings (its environment, wired by charts/sarl-platform)."""

    verl_image: str = DEFAULT_IMAGES["verl"]
    trl_image: str = DEFAULT_IMAGES["trl"]
    tracking_uri: str = ""
    ui_url: str = ""
    platform: Platform = field(default_factory=Platform)
    retry_delay_s: float = WAIT_RETRY_DELAY_S
    #: Image prefixes an Experiment may name (``SARL_ALLOWED_IMAGE_REGISTRIES``); empty: any.
    allowed_registries: tuple[str, ...] = ()
    #: The operator's own MLflow user (``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``, chart
    #: ``mlflow.auth.existingSecret``); tenants' runs use theirs (``tenant_mlflow``).
    mlflow_auth: tuple[str, str] | None = field(default=None, repr=False)
    #: Where the tenants' platform copy Secrets are (``SARL_OPERATOR_NAMESPACE``).
    operator_namespace: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        return cls(
            verl_image=env.get("SARL_TRAINER_IMAGE") or DEFAULT_IMAGES["verl"],
            trl_image=env.get("SARL_TRL_TRAINER_IMAGE") or DEFAULT_IMAGES["trl"],
            tracking_uri=env.get("SARL_MLFLOW_TRACKING_URI", ""),
            ui_url=env.get("SARL_MLFLOW_UI_URL", ""),
            platform=Platform.from_env(env),
            retry_delay_s=_seconds(env, "SARL_RETRY_DELAY_S", WAIT_RETRY_DELAY_S),
            allowed_registries=allowed_registries(env),
            mlflow_auth=_mlflow_auth(env),
            operator_namespace=env.get("SARL_OPERATOR_NAMESPACE", ""),
        )

    def image_of(self, exp: Experiment) -> str:
        """``spec.resources.image``, else the platform's image for the backend."""
        backend = job_pods.backend(exp)
        return exp.spec.resources.image or (self.trl_image if backend == "trl" else self.verl_image)

    def _spec_uri(self, exp: Experiment) -> str | None:
        # Under tenancy never the spec's: the operator calls it from the platform namespace
        # (sarl_operator.tenant_tracking refuses such a spec; this covers older objects).
        return None if self.platform.tenancy.enabled else exp.spec.tracking.mlflow_uri

    def tracking_uri_of(self, exp: Experiment) -> str:
        """``spec.tracking.mlflow_uri``, else (and always under tenancy) the platform's MLflow;
        empty: no tracking."""
        return self._spec_uri(exp) or self.tracking_uri

    def ui_url_of(self, exp: Experiment) -> str:
        """Base of run URLs: the spec's own server, else SARL_MLFLOW_UI_URL, else the URI."""
        return self._spec_uri(exp) or self.ui_url or self.tracking_uri


def _mlflow_auth(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The operator's MLflow user from its environment; None unless both are set."""
    username = env.get("MLFLOW_TRACKING_USERNAME", "")
    password = env.get("MLFLOW_TRACKING_PASSWORD", "")
    return (username, password) if username and password else None


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """``env[name]`` as a positive number of seconds (``default`` when unset)."""
    raw = env.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError as e:
        raise ValueError(f"{name}={raw!r}: not a number of seconds") from e
    if not value > 0:
        raise ValueError(f"{name}={raw!r}: must be > 0")
    return value


def status_interval_s(env: Mapping[str, str]) -> float:
    """``SARL_STATUS_INTERVAL_S`` as a positive number of seconds (default 30)."""
    return _seconds(env, "SARL_STATUS_INTERVAL_S", DEFAULT_STATUS_INTERVAL_S)


def now() -> str:
    """The current UTC time as the status writes it (``lastTransitionTime``)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def patch_status(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    desired: Mapping[str, Any],
    post_event: PostEvent,
    watched: frozenset[str] = OPERATOR_CONDITIONS,
) -> None:
    """Put the changed status fields into kopf's patch; an Event per transition of the phase
    and of the ``watched`` condition types (the operator's own). The reconcile handlers' write
    (kopf merge-patches it when the handler returns)."""
    current = body.get("status") or {}
    changes = status_patch(current, desired)
    if changes is None:
        return
    patch.setdefault("status", {}).update(changes)
    post_transitions(body, current, changes, post_event, watched)


def post_transitions(
    body: Mapping[str, Any],
    current: Mapping[str, Any],
    changes: Mapping[str, Any],
    post_event: PostEvent,
    watched: frozenset[str] = OPERATOR_CONDITIONS,
) -> None:
    """An Event per transition from the ``current`` status that ``changes`` (the status fields
    written) make: the phase, and each ``watched`` condition type whose status changed."""
    phase = changes.get("phase")
    if phase is not None:
        kind = "Warning" if phase == "Failed" else "Normal"
        post_event(body, kind, f"Phase{phase}", f"phase {current.get('phase')} -> {phase}")
    before = {c.get("type"): c.get("status") for c in current.get("conditions") or []}
    for cond in changes.get("conditions") or []:
        if cond["type"] in watched and before.get(cond["type"]) != cond["status"]:
            # Released served models and a job waiting in its Kueue queue are expected.
            warn = cond["status"] == "False" and cond.get("reason") not in (
                RELEASED,
                scheduling.QUEUED,
            )
            kind = "Warning" if warn else "Normal"
            message = f"{cond['type']}={cond['status']}: {cond.get('message', '')}".rstrip(": ")
            post_event(body, kind, str(cond.get("reason") or cond["type"]), message)


def write_fresh_status(
    body: Mapping[str, Any],
    api: KubeApi,
    kind: str,
    desired_of: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
    post_event: PostEvent,
    watched: frozenset[str] = OPERATOR_CONDITIONS,
    *,
    tries: int = STATUS_WRITE_TRIES,
) -> None:
    """The status timers' write: read the object (``kind``, named by kopf's ``body``) from the
    API, compute its status from that copy (``desired_of``; None: nothing to write) and write
    the changed fields guarded by the resourceVersion read (:meth:`KubeApi.patch_status`), with
    an Event per transition once written. Written since it was read: read and compute again, at
    most ``tries`` times, then leave it to the next tick.

    Why the timers do not fill kopf's ``patch`` as the reconcile handlers do: kopf hands a timer
    the body of the last watch event it processed (kopf 1.45.2 ``_core/engines/daemons.py``,
    ``DaemonsMemory.live_fresh_body``, which ``_core/reactor/processing.py`` replaces on each
    event), which lags a status reconcile has just patched; and kopf applies a handler's patch
    as an unguarded merge patch (``_core/actions/application.py`` ``patch_and_check`` ->
    ``_cogs/clients/patching.py`` ``patch_obj``, ``application/merge-patch+json`` on the status
    subresource), in which ``status.conditions``, a list, replaces the whole list: a condition
    reconcile wrote after the timer's copy was dropped or reverted until reconcile's next retry.
    Reading the object first narrows that window to the tick's own reads (its jobs, Workloads,
    services) but does not close it; the resourceVersion precondition closes it: the API server
    refuses (409) a write to an object changed since it was read. kopf's own guarded writes,
    patch functions (``Patch.fns``: a JSON patch with a ``test`` of the resourceVersion, in
    ``patch_obj``) do not fit: with nothing else in the patch kopf applies them to the timer's
    lagging body, and retries a refused one only at the next tick. The reconcile handlers keep
    writing through kopf's patch: their body is the event's.
    """
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    for _ in range(tries):
        fresh = api.get(f"{GROUP}/{VERSION}", kind, namespace, name)
        if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
            return  # deleted (an object created again under the name has its own timer)
        desired = desired_of(fresh)
        if desired is None:
            return
        current = fresh.get("status") or {}
        changes = status_patch(current, desired)
        if changes is None:
            return
        try:
            api.patch_status(fresh, changes)
        except VersionConflictError:
            continue  # written since it was read: compute again from the newer copy
        post_transitions(fresh, current, changes, post_event, watched)
        return
    log.info(
        "%s %s/%s: written by another writer at each of %d tries; status left to the next tick",
        kind,
        namespace,
        name,
        tries,
    )


def fail(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    post_event: PostEvent,
    message: str,
    *,
    reason: str = "InvalidSpec",
    watched: frozenset[str] = OPERATOR_CONDITIONS,
) -> kopf.PermanentError:
    """Patch the status Failed (``Ready=False`` with ``reason`` and ``message``) and return the
    error for the caller to raise: kopf does not retry the object."""
    generation = body["metadata"].get("generation")
    failed = failed_status(message, generation, now(), reason=reason)
    patch_status(body, patch, failed, post_event, watched)
    return kopf.PermanentError(message)


def tracked_run(
    body: Mapping[str, Any],
    base: Experiment,
    settings: Settings,
    tracker_factory: Callable[[str], Tracker],
    ensure: Callable[[Tracker, Mapping[str, Any]], RunRef],
    *,
    id_field: str,
    uri_field: str,
) -> tuple[str, str, dict[str, Any]]:
    """(run id, run URL, TrackingReady condition) of the object's MLflow run; raises
    TrackingError when MLflow fails.

    ``base``: the Experiment whose tracking settings apply. A run id (status field ``id_field``)
    and URL already in the status are reused without calling MLflow, so a spec update does not
    depend on MLflow being up; else ``ensure(tracker, metadata)`` gets or creates the run. No
    tracking URI: no run, and ``TrackingReady=False`` naming ``uri_field``."""
    uri = settings.tracking_uri_of(base)
    if not uri:
        message = f"no MLflow tracking URI ({uri_field} or SARL_MLFLOW_TRACKING_URI)"
        return "", "", condition("TrackingReady", "False", "TrackingNotConfigured", message)
    status = body.get("status") or {}
    if status.get(id_field) and status.get("mlflowRunUrl"):
        run_id, url = str(status[id_field]), str(status["mlflowRunUrl"])
    else:
        ref = ensure(tracker_factory(uri), body["metadata"])
        run_id, url = ref.run_id, run_url(settings.ui_url_of(base), ref)
    return run_id, url, condition("TrackingReady", "True", "RunReady", f"MLflow run {run_id}")


def tracking_unavailable(e: TrackingError) -> tuple[dict[str, Any], kopf.TemporaryError]:
    """(``TrackingReady=False`` for the status, the error to raise once it is patched), both
    with :data:`TRACKING_DOWN`: the cause (the server's address, connection errors, its reply)
    goes to the operator's log only, never to the status or the Event kopf posts of the error,
    which the tenant reads (issue 36, item 5)."""
    log.warning("MLflow unavailable, retrying in %d s: %s", TRACKING_RETRY_DELAY_S, e)
    down = condition("TrackingReady", "False", "TrackingUnavailable", TRACKING_DOWN)
    return down, kopf.TemporaryError(TRACKING_DOWN, delay=TRACKING_RETRY_DELAY_S)


def apply_owned(
    api: KubeApi,
    child: Mapping[str, Any],
    body: Mapping[str, Any],
    post_event: PostEvent,
    owner_kind: str = "Experiment",
    *,
    create: bool = False,
) -> None:
    """Create or merge-patch ``child`` controlled by the object (:func:`child_meta.owned`,
    :func:`~sarl_operator.kube.apply`), or only create it (``create``: the caller read that it
    is missing); a ``Created`` Event when it was created."""
    owned = child_meta.owned(child, body["metadata"], kind=owner_kind)
    if create:
        api.create(owned)
    elif apply(api, owned) != "created":
        return
    post_event(body, "Normal", "Created", f"created {child['kind']} {child['metadata']['name']}")


def release_owned(
    api: KubeApi,
    body: Mapping[str, Any],
    api_version: str,
    kind: str,
    name: str,
    current: Mapping[str, Any] | None,
    post_event: PostEvent,
) -> None:
    """Delete ``current`` (the object ``kind``/``name`` as read) when the object controls it; a
    :data:`~sarl_operator.status.RELEASED` Event when it was deleted."""
    meta = body["metadata"]
    if controlled_by(current, meta["uid"]) and api.delete(
        api_version, kind, meta["namespace"], name
    ):
        post_event(body, "Normal", RELEASED, f"deleted {kind} {name}")
