"""``ClusterClient``: submit, inspect, wait for, read logs of and delete Experiments on a cluster.

``sarl.Client()`` is this client (``sdk/src/sarl/client.py``); the ``sarl submit|status|logs|
delete|wait`` commands (:mod:`sarl.cli.cluster`) call it. It talks to the API server with the
``kubernetes`` client (the ``cluster`` extra) and needs the platform chart's CRD
(``experiments.sarl.dev``); the operator turns each Experiment into its children (ConfigMap,
PyTorchJob, InferenceServices, all owned by the Experiment) and writes ``status``.

Failure outcomes (all :class:`~sarl.cluster.errors.ClusterError`, one-line messages):
invalid spec → ``sarl.spec.SpecError`` before any request; CRD missing → ``CrdNotInstalled``;
401/403 → ``NotAllowed``; absent → ``ExperimentNotFound``; name taken → ``AlreadyExists``;
refused / timed out / no kubeconfig → ``ClusterUnreachable``; waits running out → ``WaitTimeout``.
Every request has a (connect, read) timeout; reads are retried a bounded number of times,
writes never (see :mod:`sarl.cluster.connection`).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from sarl.cluster import pods
from sarl.cluster.connection import Connection, connect
from sarl.cluster.errors import (
    INSTALL_CHART,
    AlreadyExists,
    ClusterError,
    CrdNotInstalled,
    ExperimentNotFound,
    NoPod,
    Target,
    WaitTimeout,
    api_error,
)
from sarl.cluster.models import PHASES, TERMINAL_PHASES, ExperimentInfo, ExperimentStatus
from sarl.spec.experiment import API_VERSION, KIND, Experiment
from sarl.spec.loader import SpecError, load_document, validate_document

GROUP: Final = "sarl.dev"
VERSION: Final = "v1alpha1"
PLURAL: Final = "experiments"
#: (connect, read) seconds per request.
DEFAULT_TIMEOUT: Final = (5.0, 30.0)

ExperimentSource = Experiment | dict[str, Any] | str | Path
#: Called with each ExperimentInfo seen while waiting (the CLI draws its status line with it).
OnPoll = Callable[[ExperimentInfo], None]


#: Stands in for the URL of a chat endpoint the operator will serve, during local validation.
_SERVED: Final = "http://served-by-the-sarl-operator.invalid/openai"


def load_for_cluster(source: ExperimentSource) -> tuple[Experiment, dict[str, Any]]:
    """Validate ``source`` as the operator will (``SpecError`` naming the field) and return it
    with the spec to store. Chat endpoints given with a model and no URL count as served by the
    operator (validated with a stand-in URL, stored without one so the operator fills in its
    own), and the chosen trainer must accept the spec
    (:func:`sarl.integrations.cluster.check_cluster`)."""
    from sarl.integrations.cluster import chat_endpoints, check_cluster, fill_chat_urls

    if isinstance(source, Experiment):
        exp = source
    else:
        data, label = load_document(source)
        spec = data.get("spec")
        filled = {**data, "spec": fill_chat_urls(spec, _SERVED)} if isinstance(spec, dict) else data
        exp = validate_document(filled, label)
    try:
        check_cluster(exp)
    except ValueError as e:
        raise SpecError(str(e)) from e
    stored = exp.spec.model_dump(mode="json")
    for _, endpoint in chat_endpoints(stored["reward"]):
        if endpoint.get("url") == _SERVED:
            del endpoint["url"]
    return exp, stored


def experiment_body(
    exp: Experiment, namespace: str, spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The custom object for ``exp``: the spec as validated, presets applied, so what the
    cluster stores is exactly what was checked here (the operator re-validates it); ``spec``
    (from :func:`load_for_cluster`) replaces the dump."""
    meta: dict[str, Any] = {"name": exp.name, "namespace": namespace}
    if exp.metadata.labels:
        meta["labels"] = dict(exp.metadata.labels)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        "spec": spec if spec is not None else exp.spec.model_dump(mode="json"),
    }


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``: changed keys, nested
    objects recursively, ``None`` for keys ``new`` lacks. Lists are replaced whole."""
    out: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                out[key] = nested
        elif key not in old or before != value:
            out[key] = value
    return out


def wanted_phases(until: str | Iterable[str] | None) -> frozenset[str]:
    """``until`` as a set of phases (default: the terminal ones); unknown phases → ValueError."""
    wanted = (
        TERMINAL_PHASES
        if until is None
        else frozenset([until] if isinstance(until, str) else until)
    )
    unknown = sorted(wanted - set(PHASES))
    if unknown or not wanted:
        raise ValueError(f"until={sorted(wanted)}: phases are {', '.join(PHASES)}")
    return wanted


class ClusterClient:
    """Experiments on a Kubernetes cluster (kubeconfig, or the pod's service account).

    ``namespace`` defaults to the kubeconfig context's namespace, else ``default``;
    ``request_timeout`` is (connect, read) seconds per request; ``retries`` extra attempts
    are made for reads (with ``backoff`` seconds, doubling, in between).
    """

    def __init__(
        self,
        *,
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        namespace: str | None = None,
        request_timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        self._conn: Connection = connect(
            kubeconfig=kubeconfig,
            context=context,
            namespace=namespace,
            timeout=request_timeout,
            retries=retries,
            backoff=backoff,
        )
        self._crd_seen = False

    @property
    def namespace(self) -> str:
        """The namespace used when a call names none."""
        return self._conn.namespace

    @property
    def host(self) -> str:
        """The API server's URL."""
        return self._conn.host

    # ---- Experiments ----

    def submit(
        self, experiment: ExperimentSource, *, namespace: str | None = None, replace: bool = False
    ) -> ExperimentInfo:
        """Validate locally (``SpecError`` before any request), then create the Experiment.

        An existing Experiment of that name → ``AlreadyExists``, or with ``replace=True`` its
        spec is replaced (:meth:`replace`) and the operator reconciles the new spec.
        """
        exp, spec = load_for_cluster(experiment)
        ns = self._submit_namespace(exp, namespace)
        self._require_crd()
        try:
            with self._translate(Target("create", ns, exp.name)):
                obj = self._conn.call(
                    self._custom().create_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    ns,
                    PLURAL,
                    experiment_body(exp, ns, spec),
                )
        except AlreadyExists:
            if not replace:
                raise
            return self.replace(exp, namespace=ns)
        return ExperimentInfo.from_object(obj)

    def replace(
        self, experiment: ExperimentSource, *, namespace: str | None = None
    ) -> ExperimentInfo:
        """Replace the spec (and merge the labels) of an existing Experiment.

        Sent as a JSON merge patch from the stored spec to the new one (keys no longer given
        are set to null, i.e. removed), carrying the stored ``resourceVersion``: a concurrent
        change fails with ``Rejected`` instead of being overwritten. ``status`` is untouched.
        """
        exp, spec = load_for_cluster(experiment)
        ns = self._submit_namespace(exp, namespace)
        current = self._get_object(exp.name, ns)
        body = experiment_body(exp, ns, spec)
        meta = current.get("metadata") or {}
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "spec": merge_patch(current.get("spec") or {}, body["spec"]),
        }
        if "labels" in body["metadata"]:
            patch["metadata"]["labels"] = body["metadata"]["labels"]
        with self._translate(Target("replace", ns, exp.name)):
            obj = self._conn.call(
                self._custom().patch_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURAL,
                exp.name,
                patch,
            )
        return ExperimentInfo.from_object(obj)

    def get(self, name: str, *, namespace: str | None = None) -> ExperimentInfo:
        """The Experiment ``name`` (``ExperimentNotFound`` if absent)."""
        return ExperimentInfo.from_object(self._get_object(name, self._ns(namespace)))

    def status(self, name: str, *, namespace: str | None = None) -> ExperimentStatus:
        """Only the status of the Experiment ``name``."""
        return self.get(name, namespace=namespace).status

    def list(
        self, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> builtins.list[ExperimentInfo]:
        """Experiments in ``namespace`` (or in every namespace), sorted by namespace and name."""
        ns = None if all_namespaces else self._ns(namespace)
        self._require_crd()
        api = self._custom()
        with self._translate(Target("list", ns)):
            if ns is None:
                out = self._conn.call(
                    api.list_cluster_custom_object, GROUP, VERSION, PLURAL, read=True
                )
            else:
                out = self._conn.call(
                    api.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, read=True
                )
        infos = [ExperimentInfo.from_object(item) for item in out.get("items") or []]
        return sorted(infos, key=lambda i: (i.namespace, i.name))

    def wait(
        self,
        name: str,
        *,
        namespace: str | None = None,
        until: str | Iterable[str] | None = None,
        timeout: float = 3600.0,
        poll_interval: float = 5.0,
        on_poll: OnPoll | None = None,
    ) -> ExperimentInfo:
        """Poll until the phase is in ``until`` (default ``Succeeded``/``Failed``); returns
        that ExperimentInfo. Ending in another terminal phase → ``ClusterError``; ``timeout``
        seconds passing → ``WaitTimeout`` (the Experiment is left running)."""
        wanted = wanted_phases(until)
        ns = self._ns(namespace)
        deadline = time.monotonic() + timeout
        while True:
            info = self.get(name, namespace=ns)
            if on_poll is not None:
                on_poll(info)
            if info.phase in wanted:
                return info
            if info.status.done:
                why = info.status.failure_message()
                raise ClusterError(
                    f"experiment {name} in namespace {ns} ended {info.phase} while waiting for "
                    f"{' or '.join(sorted(wanted))}" + (f": {why}" if why else "")
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"experiment {name} in namespace {ns} is {info.status.summary()} after "
                    f"{timeout:g}s of waiting for {' or '.join(sorted(wanted))}"
                )
            time.sleep(min(poll_interval, left))

    def delete(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = False,
        timeout: float = 300.0,
        poll_interval: float = 2.0,
    ) -> None:
        """Delete the Experiment; the garbage collector deletes its children (owner
        references). ``wait=True`` uses foreground deletion (the Experiment disappears only
        after its children) and polls until it is gone, up to ``timeout`` seconds."""
        ns = self._ns(namespace)
        self._require_crd()
        policy = "Foreground" if wait else "Background"
        with self._translate(Target("delete", ns, name)):
            self._conn.call(
                self._custom().delete_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURAL,
                name,
                propagation_policy=policy,
            )
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._get_object(name, ns)
            except ExperimentNotFound:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"experiment {name} in namespace {ns} still exists {timeout:g}s after "
                    "deletion (its children are still being deleted, or a finalizer blocks it)"
                )
            time.sleep(min(poll_interval, left))

    # ---- logs ----

    def logs(
        self,
        name: str,
        *,
        namespace: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        replica: str = "master",
        index: int = 0,
        wait: float = 0.0,
        poll: float = 2.0,
        on_wait: OnPoll | None = None,
    ) -> Iterator[str]:
        """Lines of the log of the training pod (``replica`` #``index`` of the PyTorchJob).

        The pod is looked up now; with ``wait`` > 0 for up to ``wait`` seconds until it exists
        and left ``Pending`` (``on_wait`` is called with the Experiment at each poll), e.g. right
        after ``submit``. No pod by then, or the Experiment ended without one → ``NoPod`` with
        its phase. The lines are read as the iterator is consumed; ``follow`` keeps streaming
        until the container ends (no read timeout then; interrupt to stop).
        """
        ns = self._ns(namespace)
        deadline = time.monotonic() + wait
        while True:
            info = self.get(name, namespace=ns)
            pod = self._pods().find(name, ns, replica, index)
            if pod is not None and (wait <= 0 or pods.started(pod)):
                return self._pods().lines(pod, ns, follow=follow, tail=tail)
            ended = info.phase in TERMINAL_PHASES and pod is None
            if wait <= 0 or ended or time.monotonic() >= deadline:
                raise NoPod(
                    f"no {replica} pod (index {index}) of experiment {name} in namespace {ns} "
                    f"yet (phase: {info.phase or 'not picked up by the operator yet'})"
                )
            if on_wait is not None:
                on_wait(info)
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))

    # ---- internals ----

    def _pods(self) -> pods.PodLogs:
        return pods.PodLogs(self._conn, self._translate)

    def _ns(self, namespace: str | None) -> str:
        return namespace or self._conn.namespace

    def _submit_namespace(self, exp: Experiment, namespace: str | None) -> str:
        """``namespace`` > ``metadata.namespace`` > the client's; a conflict is an error (as
        with ``kubectl apply -n``)."""
        if namespace and exp.metadata.namespace and namespace != exp.metadata.namespace:
            raise SpecError(
                f"metadata.namespace={exp.metadata.namespace!r} does not match the namespace "
                f"{namespace!r} given"
            )
        return namespace or exp.metadata.namespace or self._conn.namespace

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._conn.api)

    def _get_object(self, name: str, ns: str) -> dict[str, Any]:
        self._require_crd()
        with self._translate(Target("get", ns, name)):
            obj = self._conn.call(
                self._custom().get_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURAL,
                name,
                read=True,
            )
        return dict(obj)

    def _require_crd(self) -> None:
        """Check discovery once per client: ``sarl.dev/v1alpha1`` must serve ``experiments``.

        Checked before the first request (as ``kubectl`` does), so a missing CRD is reported
        as such rather than as a bare 404 on whatever was asked."""
        if self._crd_seen:
            return
        from kubernetes.client.exceptions import ApiException

        try:
            with self._translate(Target("discover", None, f"{GROUP}/{VERSION}", "APIs")):
                found = self._conn.call(self._custom().get_api_resources, GROUP, VERSION, read=True)
        except ClusterError as e:
            cause = e.__cause__
            if isinstance(cause, ApiException) and cause.status == 404:
                raise CrdNotInstalled(INSTALL_CHART) from e
            raise
        names = {r.name for r in (found.resources or [])}
        if PLURAL not in names:
            raise CrdNotInstalled(INSTALL_CHART)
        self._crd_seen = True

    @contextmanager
    def _translate(self, target: Target) -> Iterator[None]:
        """Turn ``kubernetes``/urllib3 exceptions raised inside into ``ClusterError``s."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except (ApiException, HTTPError) as e:
            err = api_error(e, target, self._conn.host)
            if isinstance(err, ExperimentNotFound):
                self._crd_seen = False  # a 404 may mean the CRD went away: look again
                self._require_crd()
            raise err from e
