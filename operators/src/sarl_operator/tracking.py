"""The MLflow side of an Experiment: its run (found or created) and the progress the trainer logs.

Called by the handlers (``experiment_handlers``, ``study_handlers``, through ``reconcile``): at
reconcile, :meth:`MlflowTracking.ensure_run` gives the run whose id is passed to the training job
as ``MLFLOW_RUN_ID`` (so the trainer logs into it instead of starting its own); the status timer
reads :meth:`MlflowTracking.latest_progress` for lastStep/lastReward.

It talks to MLflow's REST API (``/api/2.0/mlflow/...``) with httpx rather than the ``mlflow``
package: the operator image stays small, and every call has a timeout and bounded retries.
Transient failures (timeouts, dropped connections, 408/429/5xx) are retried ``max_retries`` times
with capped exponential backoff (:mod:`sarl.http.retry`); then, or at once on another 4xx,
:class:`TrackingError` is raised with the URL and cause. What the caller does with it is the
caller's policy (reconcile: condition ``TrackingReady=False`` and a retry later; timer: keep the
last values).

The run is found by its tag ``sarl.dev/experiment-uid=<uid>`` (the Experiment's Kubernetes uid),
so repeated reconciles and operator restarts reuse one run, and a re-created Experiment of the
same name gets a fresh one. The JSON -> value mappings are pure functions, tested on their own.

What MLflow's UI shows comes from :mod:`sarl.tracking.describe`, as for local runs: experiments
are created with the kind "model training" and a description (and get them when they lack
them), runs with a description (tag ``mlflow.note.content``) and, for a Study's runs, params
``arm`` and ``seed``; run URLs open the UI's model-training layout.
"""

from __future__ import annotations

import functools
import logging
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from sarl.http.retry import backoff_delay, is_transient_status, one_line
from sarl.spec.secrets import redact
from sarl.tracking.describe import (
    NOTE_TAG,
    experiment_description,
    experiment_tags,
    missing_experiment_tags,
    ui_url,
)
from sarl.tracking.metrics import REWARD_MEAN

log = logging.getLogger(__name__)

UID_TAG: Final = "sarl.dev/experiment-uid"
EXPERIMENT_TAG: Final = "sarl.dev/experiment"
NAMESPACE_TAG: Final = "sarl.dev/namespace"
#: verl's own mean sequence score, for runs whose trainer does not log REWARD_MEAN.
VERL_SCORE_MEAN: Final = "critic/score/mean"
#: TRL's mean reward (GRPO/RLOO log it as ``reward``; transformers' MLflow callback passes it on).
TRL_REWARD_MEAN: Final = "reward"
#: Reward metrics in order of preference for lastStep/lastReward.
REWARD_METRICS: Final = (REWARD_MEAN, VERL_SCORE_MEAN, TRL_REWARD_MEAN)
_API: Final = "/api/2.0/mlflow"
#: ``as_user`` of a request sent without credentials.
ANONYMOUS: Final = ("", "")


class TrackingError(RuntimeError):
    """An MLflow call failed after its retries; the message names the URL and the cause."""


@dataclass(frozen=True)
class RunRef:
    """An MLflow run: its id and the id of the MLflow experiment holding it."""

    run_id: str
    experiment_id: str


@dataclass(frozen=True)
class Progress:
    """The latest training step and its mean reward, as logged by the trainer."""

    step: int
    reward: float


# ---- pure mappings ----


def run_url(ui_base: str, ref: RunRef) -> str:
    """The MLflow UI page of the run, in the UI's model-training layout:
    ``<ui>/#/experiments/<eid>/runs/<rid>?workflowType=machine_learning``."""
    return ui_url(ui_base, ref.experiment_id, ref.run_id)


def uid_filter(uid: str) -> str:
    """MLflow search filter for the run tagged with this Experiment uid (backticks quote a key
    with ``.`` and ``/``; a uid never contains a quote, but one is escaped anyway)."""
    return f"tags.`{UID_TAG}` = '{uid.replace(chr(39), chr(92) + chr(39))}'"


def run_tags(
    name: str, namespace: str, uid: str, extra: Mapping[str, str], description: str | None = None
) -> list[dict[str, str]]:
    """The run's tags: its ``description`` (unless the user's tags hold one), the user's
    ``spec.tracking.tags`` and sarl's own (which win), redacted (:func:`sarl.spec.secrets.redact`:
    validation refuses credentials; this catches any that slips through)."""
    tags = redact(
        {
            **({NOTE_TAG: description} if description else {}),
            **extra,
            EXPERIMENT_TAG: name,
            NAMESPACE_TAG: namespace,
            UID_TAG: uid,
        }
    )
    return key_values(tags)


def key_values(items: Mapping[str, str]) -> list[dict[str, str]]:
    """MLflow's REST spelling of tags and params: ``[{"key": ..., "value": ...}]``."""
    return [{"key": k, "value": str(v)} for k, v in items.items()]


def tag_map(payload: Mapping[str, Any]) -> dict[str, str]:
    """The tags of an experiment or run JSON (``{"tags": [{"key", "value"}]}``) as a mapping."""
    return {str(t.get("key")): str(t.get("value") or "") for t in payload.get("tags") or []}


def run_ref(payload: Mapping[str, Any]) -> RunRef:
    """RunRef from a ``{"run": {"info": ...}}`` reply (runs/create, runs/get) or a search hit."""
    info = (payload.get("run") or payload).get("info") or {}
    run_id, experiment_id = info.get("run_id"), info.get("experiment_id")
    if not run_id or not experiment_id:
        raise TrackingError(f"MLflow reply has no run_id/experiment_id: {one_line(str(payload))}")
    return RunRef(str(run_id), str(experiment_id))


def progress_from_metrics(metrics: Sequence[Mapping[str, Any]]) -> Progress | None:
    """Latest step and reward from a run's ``data.metrics`` (MLflow keeps the latest value of
    each key there): the first of :data:`REWARD_METRICS` present; None when none is logged."""
    by_key = {m.get("key"): m for m in metrics}
    for key in REWARD_METRICS:
        metric = by_key.get(key)
        if metric is not None and metric.get("value") is not None:
            return Progress(step=int(metric.get("step") or 0), reward=float(metric["value"]))
    return None


def denied_hint(status: int) -> str:
    """What a refusal by MLflow's basic-auth app means for the operator (empty otherwise)."""
    if status == 401:
        return (
            " (MLflow refused the credentials: the tenant's MLflow user is created from its "
            "Secret by `helm upgrade`; the operator's own is mlflow.auth.existingSecret)"
        )
    if status == 403:
        return (
            " (the MLflow user has no permission on it: another MLflow user created it; an "
            "MLflow admin can delete or re-grant it)"
        )
    return ""


# ---- the client ----


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The TLS context httpx would build for a client (CA bundle, ``SSL_CERT_FILE``/``_DIR``),
    built once per process: building it loads the CA bundle (~50 ms of CPU), and every status
    tick of every Experiment makes a client."""
    return httpx.create_ssl_context()


@dataclass(frozen=True)
class MlflowTracking:
    """MLflow REST client of one tracking server (``base_url``, e.g. http://mlflow:5000).

    Every request is bounded by ``timeout_s`` (reading, writing) and ``connect_timeout_s``
    (connecting: short, so an unreachable server holds one of the operator's workers for at most
    ``(max_retries + 1) * connect_timeout_s`` plus the backoffs, ~10 s, per call); transient
    failures are retried ``max_retries`` times after a backoff of at most
    ``backoff_s * 2**(n-1)`` (capped at ``max_backoff_s``). ``transport`` and ``sleep`` are for
    tests.
    """

    base_url: str
    timeout_s: float = 10.0
    connect_timeout_s: float = 3.0
    max_retries: int = 2
    backoff_s: float = 0.5
    max_backoff_s: float = 4.0
    transport: httpx.BaseTransport | None = None
    sleep: Callable[[float], None] = time.sleep
    auth: tuple[str, str] | None = field(default=None, repr=False)
    #: On a platform with tenants, the other tenants' MLflow credentials: an existing experiment
    #: the operator would log a tenant's runs into must be readable by none of them
    #: (:meth:`_check_not_shared`). Empty: not checked.
    other_tenants: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def _call(
        self, method: str, path: str, as_user: tuple[str, str] | None = None, **kwargs: Any
    ) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of one request (as ``as_user``, else :attr:`auth`), retried while
        transient; 200 and 4xx return."""
        url = f"{self.base_url.rstrip('/')}{_API}/{path}"
        cause = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.sleep(backoff_delay(attempt, self.backoff_s, self.max_backoff_s))
            try:
                timeout = httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)
                with httpx.Client(
                    timeout=timeout, transport=self.transport, verify=_ssl_context()
                ) as client:
                    who = None if as_user is ANONYMOUS else (as_user or self.auth)
                    response = client.request(method, url, auth=who, **kwargs)
            except httpx.HTTPError as e:  # timeouts, refused/reset connections
                cause = f"{type(e).__name__}: {e}"
                log.warning("MLflow %s %s; attempt %d", url, cause, attempt + 1)
                continue
            if is_transient_status(response.status_code):
                cause = f"HTTP {response.status_code}: {one_line(response.text)}"
                continue
            try:
                body = response.json() if response.content else {}
            except ValueError:
                body = {"message": one_line(response.text)}
            return response.status_code, body if isinstance(body, dict) else {}
        attempts = self.max_retries + 1
        raise TrackingError(f"MLflow {url}: {cause} (after {attempts} attempts)")

    def _ok(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        status, body = self._call(method, path, **kwargs)
        if status != 200:
            raise TrackingError(
                f"MLflow {path}: HTTP {status}: "
                f"{body.get('message') or body.get('error_code')}{denied_hint(status)}"
            )
        return body

    def experiment_id(self, name: str, description: str | None = None) -> str:
        """Id of the MLflow experiment ``name``, created if missing (a concurrent creation by
        someone else is fine: the name is then looked up again) with sarl's experiment tags
        (kind "model training", ``description``, by default
        :func:`~sarl.tracking.describe.experiment_description`); an existing experiment gets
        the ones it lacks."""
        about = description or experiment_description(name)
        for _ in range(2):
            status, body = self._call(
                "GET", "experiments/get-by-name", params={"experiment_name": name}
            )
            if status == 200:
                experiment = body["experiment"]
                eid = str(experiment["experiment_id"])
                self._check_not_shared(eid, name)
                self._add_experiment_tags(eid, tag_map(experiment), about)
                return eid
            if body.get("error_code") != "RESOURCE_DOES_NOT_EXIST":
                raise TrackingError(
                    f"MLflow experiments/get-by-name {name!r}: HTTP {status}{denied_hint(status)}"
                )
            tags = key_values(redact(experiment_tags(about)))
            status, body = self._call(
                "POST", "experiments/create", json={"name": name, "tags": tags}
            )
            if status == 200:
                return str(body["experiment_id"])
            if body.get("error_code") != "RESOURCE_ALREADY_EXISTS":
                raise TrackingError(f"MLflow experiments/create {name!r}: HTTP {status}: {body}")
        raise TrackingError(f"MLflow experiment {name!r}: created but not found")

    def _check_not_shared(self, experiment_id: str, name: str) -> None:
        """Refuse an existing experiment another tenant can read (TrackingError).

        MLflow has no permission on experiment *names*: team-b may create ``team-a/x`` before
        team-a does; team-a's user then has no permission on it (the lookup is refused, 403),
        or, once team-b grants it access, team-a's runs would land where team-b reads them. So
        the experiment is read as each other tenant's user: any that may read it makes it
        unusable. Only MLflow's plain ``experiments/get`` is used (its permission API changed
        between 2.x and 3.x), exactly what that tenant's own client would do.
        An MLflow that answers anonymous requests (``mlflow.auth.enabled: false``) lets every
        tenant read everything anyway: nothing is checked there."""
        if not self.other_tenants:
            return
        anonymous, _ = self._call(
            "GET", "experiments/get", as_user=ANONYMOUS, params={"experiment_id": experiment_id}
        )
        if anonymous == 200:
            return
        for user, password in self.other_tenants:
            status, _ = self._call(
                "GET",
                "experiments/get",
                as_user=(user, password),
                params={"experiment_id": experiment_id},
            )
            if status == 200:
                raise TrackingError(
                    f"MLflow experiment {name!r} is readable by another tenant's user "
                    f"{user!r} (it created the name or was granted it): the operator does not "
                    "log this tenant's runs there; an MLflow admin must delete it or revoke "
                    "that permission"
                )

    def _add_experiment_tags(
        self, experiment_id: str, existing: Mapping[str, str], description: str
    ) -> None:
        """Best effort: an operator allowed to log runs but not to edit the experiment (MLflow's
        auth has per-experiment permissions) still reconciles; the labels are not worth it."""
        for key, value in redact(missing_experiment_tags(existing, description)).items():
            try:
                self._ok(
                    "POST",
                    "experiments/set-experiment-tag",
                    json={"experiment_id": experiment_id, "key": key, "value": value},
                )
            except TrackingError as e:
                log.warning("MLflow experiment %s: could not set tag %s: %s", experiment_id, key, e)
                return

    def find_run(self, experiment_id: str, uid: str) -> RunRef | None:
        """The run tagged with this Experiment uid, oldest first; None if there is none."""
        body = self._ok(
            "POST",
            "runs/search",
            json={
                "experiment_ids": [experiment_id],
                "filter": uid_filter(uid),
                "max_results": 1,
                "order_by": ["attributes.start_time ASC"],
            },
        )
        runs = body.get("runs") or []
        return run_ref(runs[0]) if runs else None

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
    ) -> RunRef:
        """The Experiment's run: found by its uid tag, else created (run name = ``run_name``,
        ``description`` as its MLflow description), with ``params`` logged (again, when the run
        was found: MLflow accepts a param logged twice with the same value, so a reconcile that
        failed between creating the run and logging them completes it).
        ``experiment_description`` describes an experiment this creates."""
        eid = self.experiment_id(experiment_name, experiment_description)
        ref = self.find_run(eid, uid)
        if ref is None:
            body = self._ok(
                "POST",
                "runs/create",
                json={
                    "experiment_id": eid,
                    "run_name": run_name,
                    "start_time": int(time.time() * 1000),
                    "tags": run_tags(run_name, namespace, uid, tags or {}, description),
                },
            )
            ref = run_ref(body)
        if params:
            self._ok(
                "POST",
                "runs/log-batch",
                json={"run_id": ref.run_id, "params": key_values(redact(params))},
            )
        return ref

    def latest_progress(self, run_id: str) -> Progress | None:
        """Latest step/reward of the run (None: nothing logged yet)."""
        body = self._ok("GET", "runs/get", params={"run_id": run_id})
        metrics = ((body.get("run") or {}).get("data") or {}).get("metrics") or []
        return progress_from_metrics(metrics)
