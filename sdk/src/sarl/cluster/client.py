"""``ClusterClient``: submit, inspect, wait for, read logs of and delete Experiments (and
Studies) on a cluster.

``sarl.Client()`` is this client (``sdk/src/sarl/client.py``); the ``sarl submit|status|logs|
delete|wait`` commands (:mod:`sarl.cli.cluster`) call it. It talks to the API server with the
``kubernetes`` client (the ``cluster`` extra) and needs the platform chart's CRDs
(``experiments.sarl.dev``, ``studies.sarl.dev``); the operator turns each Experiment into its
children (ConfigMap, PyTorchJob, InferenceServices, all owned by the Experiment) and each Study
into one Experiment per arm x seed (owned by the Study) and a report, and writes ``status``.
``submit`` takes either kind (dispatching on ``kind``); the other Study calls are
``get_study``, ``list_studies``, ``study_runs``, ``wait_study`` and ``delete_study``.

Failure outcomes (all :class:`~sarl.cluster.errors.ClusterError`, one-line messages):
invalid spec → ``sarl.spec.SpecError`` before any request; CRD missing → ``CrdNotInstalled``;
401/403 → ``NotAllowed``; absent → ``ExperimentNotFound`` / ``StudyNotFound``; name taken →
``AlreadyExists``; refused / timed out / no kubeconfig → ``ClusterUnreachable``; waits running
out → ``WaitTimeout``. Every request has a (connect, read) timeout; reads are retried a bounded
number of times, writes never (see :mod:`sarl.cluster.connection`).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, overload

from sarl.cluster import pods
from sarl.cluster.connection import Connection, connect
from sarl.cluster.errors import (
    INSTALL_CHART,
    INSTALL_STUDY_CRD,
    AlreadyExists,
    ClusterError,
    CrdNotInstalled,
    ExperimentNotFound,
    NoPod,
    StudyNotFound,
    Target,
    WaitTimeout,
    api_error,
)
from sarl.cluster.models import (
    PHASES,
    TERMINAL_PHASES,
    ExperimentInfo,
    ExperimentStatus,
    StudyInfo,
)
from sarl.spec.experiment import API_VERSION, KIND, Experiment
from sarl.spec.loader import SpecError, load_document, load_study, validate_document
from sarl.spec.study import LABEL_STUDY, STUDY_KIND, Study, is_study_document

GROUP: Final = "sarl.dev"
VERSION: Final = "v1alpha1"
PLURAL: Final = "experiments"
STUDY_PLURAL: Final = "studies"
#: (connect, read) seconds per request.
DEFAULT_TIMEOUT: Final = (5.0, 30.0)

ExperimentSource = Experiment | dict[str, Any] | str | Path
StudySource = Study | dict[str, Any] | str | Path
#: Called with each ExperimentInfo seen while waiting (the CLI draws its status line with it).
OnPoll = Callable[[ExperimentInfo], None]
OnStudyPoll = Callable[[StudyInfo], None]


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


def load_study_for_cluster(source: StudySource) -> tuple[Study, dict[str, Any]]:
    """Validate a Study as the operator will (``SpecError`` naming the field) and return it
    with the spec to store: the Study itself, then every arm x seed Experiment it expands to
    with the checks of :func:`load_for_cluster` (the same ``check_cluster`` the Experiment
    submit path and the operator run), an error naming the arm and seed. Chat endpoints the
    operator would serve (a model without URL) are not supported in a Study: name their URL."""
    study = load_study(source)
    arms = [arm.name for arm in study.spec.arms]
    for run in study.runs():
        try:
            load_for_cluster(run.experiment)
        except SpecError as e:
            index = arms.index(run.arm)
            # The check names the run's Experiment fields; say where a Study sets them.
            raise SpecError(
                f"spec.arms[{index}] ({run.arm}, seed {run.seed}): {e} (in the Study, the run's "
                f"spec.<field> is spec.base.<field>, or spec.arms[{index}].override.<field>)"
            ) from e
    return study, study.spec.model_dump(mode="json")


def is_study_source(source: ExperimentSource | StudySource) -> bool:
    """Whether ``source`` is a Study (or a document, file or text declaring ``kind: Study``);
    a document that cannot be read is not (the Experiment path reports why)."""
    if isinstance(source, Study):
        return True
    if isinstance(source, Experiment):
        return False
    try:
        data, _ = load_document(source)
    except SpecError:
        return False
    return is_study_document(data)


def study_body(study: Study, namespace: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The custom object for ``study`` (the spec as validated, presets applied)."""
    meta: dict[str, Any] = {"name": study.name, "namespace": namespace}
    if study.metadata.labels:
        meta["labels"] = dict(study.metadata.labels)
    return {
        "apiVersion": API_VERSION,
        "kind": STUDY_KIND,
        "metadata": meta,
        "spec": spec if spec is not None else study.spec.model_dump(mode="json"),
    }


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
        self._crd_seen: set[str] = set()

    @property
    def namespace(self) -> str:
        """The namespace used when a call names none."""
        return self._conn.namespace

    @property
    def host(self) -> str:
        """The API server's URL."""
        return self._conn.host

    # ---- Experiments ----

    @overload
    def submit(
        self, experiment: Study, *, namespace: str | None = None, replace: bool = False
    ) -> StudyInfo: ...

    @overload
    def submit(
        self, experiment: Experiment, *, namespace: str | None = None, replace: bool = False
    ) -> ExperimentInfo: ...

    @overload
    def submit(
        self,
        experiment: dict[str, Any] | str | Path,
        *,
        namespace: str | None = None,
        replace: bool = False,
    ) -> ExperimentInfo | StudyInfo: ...

    def submit(
        self,
        experiment: ExperimentSource | StudySource,
        *,
        namespace: str | None = None,
        replace: bool = False,
    ) -> ExperimentInfo | StudyInfo:
        """Validate locally (``SpecError`` before any request), then create the Experiment, or
        the Study when ``experiment`` is one (a document with ``kind: Study``, see
        :meth:`submit_study`).

        An existing Experiment of that name → ``AlreadyExists``, or with ``replace=True`` its
        spec is replaced (:meth:`replace`) and the operator reconciles the new spec.
        """
        if not isinstance(experiment, Experiment) and is_study_source(experiment):
            return self.submit_study(experiment, namespace=namespace, replace=replace)
        exp, spec = load_for_cluster(experiment)  # type: ignore[arg-type]  # not a Study
        ns = self._submit_namespace(exp, namespace)
        body = experiment_body(exp, ns, spec)
        try:
            obj = self._create(body, PLURAL)
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
        return ExperimentInfo.from_object(self._replace(experiment_body(exp, ns, spec), PLURAL))

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
        infos = [ExperimentInfo.from_object(item) for item in self._list(ns, PLURAL)]
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
        self._delete(name, self._ns(namespace), PLURAL, wait, timeout, poll_interval)

    # ---- Studies ----

    def submit_study(
        self, study: StudySource, *, namespace: str | None = None, replace: bool = False
    ) -> StudyInfo:
        """Validate locally (the Study and each arm x seed Experiment, ``SpecError`` before any
        request, see :func:`load_study_for_cluster`), then create the Study; the operator
        creates its Experiments. Name taken → ``AlreadyExists``, or with ``replace=True`` the
        spec is replaced (:meth:`replace_study`)."""
        parsed, spec = load_study_for_cluster(study)
        ns = self._submit_namespace(parsed, namespace)
        try:
            obj = self._create(study_body(parsed, ns, spec), STUDY_PLURAL)
        except AlreadyExists:
            if not replace:
                raise
            return self.replace_study(parsed, namespace=ns)
        return StudyInfo.from_object(obj)

    def replace_study(self, study: StudySource, *, namespace: str | None = None) -> StudyInfo:
        """Replace the spec of an existing Study (a merge patch carrying the stored
        ``resourceVersion``, as :meth:`replace`). The operator creates the runs the new spec
        adds; Experiments already created keep the spec they started with."""
        parsed, spec = load_study_for_cluster(study)
        ns = self._submit_namespace(parsed, namespace)
        return StudyInfo.from_object(self._replace(study_body(parsed, ns, spec), STUDY_PLURAL))

    def get_study(self, name: str, *, namespace: str | None = None) -> StudyInfo:
        """The Study ``name`` (``StudyNotFound`` if absent)."""
        return StudyInfo.from_object(self._get_object(name, self._ns(namespace), STUDY_PLURAL))

    def list_studies(
        self, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> builtins.list[StudyInfo]:
        """Studies in ``namespace`` (or in every namespace), sorted by namespace and name."""
        ns = None if all_namespaces else self._ns(namespace)
        infos = [StudyInfo.from_object(item) for item in self._list(ns, STUDY_PLURAL)]
        return sorted(infos, key=lambda i: (i.namespace, i.name))

    def study_runs(
        self, name: str, *, namespace: str | None = None
    ) -> builtins.list[ExperimentInfo]:
        """The Experiments of the Study ``name`` (label ``sarl.dev/study``), sorted by name."""
        ns = self._ns(namespace)
        selector = f"{LABEL_STUDY}={name}"
        items = self._list(ns, PLURAL, label_selector=selector)
        infos = [ExperimentInfo.from_object(item) for item in items]
        # The selector is applied here too, for API servers (and test doubles) that ignore it.
        return sorted((i for i in infos if i.labels.get(LABEL_STUDY) == name), key=lambda i: i.name)

    def wait_study(
        self,
        name: str,
        *,
        namespace: str | None = None,
        until: str | Iterable[str] | None = None,
        timeout: float = 86400.0,
        poll_interval: float = 10.0,
        on_poll: OnStudyPoll | None = None,
    ) -> StudyInfo:
        """Poll until the Study's phase is in ``until`` (default ``Succeeded``/``Failed``),
        like :meth:`wait`."""
        wanted = wanted_phases(until)
        ns = self._ns(namespace)
        deadline = time.monotonic() + timeout
        while True:
            info = self.get_study(name, namespace=ns)
            if on_poll is not None:
                on_poll(info)
            if info.phase in wanted:
                return info
            if info.status.done:
                why = info.status.failure_message()
                raise ClusterError(
                    f"study {name} in namespace {ns} ended {info.phase} while waiting for "
                    f"{' or '.join(sorted(wanted))}" + (f": {why}" if why else "")
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"study {name} in namespace {ns} is {info.status.summary()} after "
                    f"{timeout:g}s of waiting for {' or '.join(sorted(wanted))}"
                )
            time.sleep(min(poll_interval, left))

    def delete_study(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = False,
        timeout: float = 300.0,
        poll_interval: float = 2.0,
    ) -> None:
        """Delete the Study; the garbage collector deletes its Experiments (and through them
        their jobs), ConfigMap and report Job. ``wait`` as in :meth:`delete`."""
        self._delete(name, self._ns(namespace), STUDY_PLURAL, wait, timeout, poll_interval)

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
        timeout: float | None = None,
    ) -> Iterator[str]:
        """Lines of the log of the training pod (``replica`` #``index`` of the PyTorchJob).

        The pod is looked up now; with ``wait`` > 0 for up to ``wait`` seconds until it exists
        and left ``Pending`` (``on_wait`` is called with the Experiment at each poll), e.g. right
        after ``submit``. No pod by then, or the Experiment ended without one → ``NoPod`` with
        its phase. The lines are read as the iterator is consumed; ``follow`` keeps streaming
        until the container ends (no read timeout then; interrupt to stop), or, with
        ``timeout``, until ``timeout`` seconds after the log was opened: the iterator then
        simply ends (a notebook cell that follows a log for a while; the pod is not affected).
        """
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout={timeout}: must be > 0 seconds (or None: no limit)")
        ns = self._ns(namespace)
        deadline = time.monotonic() + wait
        while True:
            info = self.get(name, namespace=ns)
            pod = self._pods().find(name, ns, replica, index)
            if pod is not None and (wait <= 0 or pods.started(pod)):
                return self._pods().lines(pod, ns, follow=follow, tail=tail, timeout=timeout)
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

    def _submit_namespace(self, exp: Experiment | Study, namespace: str | None) -> str:
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

    def _get_object(self, name: str, ns: str, plural: str = PLURAL) -> dict[str, Any]:
        self._require_crd(plural)
        with self._translate(Target("get", ns, name, plural)):
            obj = self._conn.call(
                self._custom().get_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                plural,
                name,
                read=True,
            )
        return dict(obj)

    def _create(self, body: dict[str, Any], plural: str) -> dict[str, Any]:
        meta = body["metadata"]
        self._require_crd(plural)
        with self._translate(Target("create", meta["namespace"], meta["name"], plural)):
            obj = self._conn.call(
                self._custom().create_namespaced_custom_object,
                GROUP,
                VERSION,
                meta["namespace"],
                plural,
                body,
            )
        return dict(obj)

    def _replace(self, body: dict[str, Any], plural: str) -> dict[str, Any]:
        """Merge-patch the stored object's spec (and labels) to ``body``'s, carrying the stored
        ``resourceVersion`` (a concurrent change fails with ``Rejected``)."""
        name, ns = body["metadata"]["name"], body["metadata"]["namespace"]
        current = self._get_object(name, ns, plural)
        meta = current.get("metadata") or {}
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "spec": merge_patch(current.get("spec") or {}, body["spec"]),
        }
        if "labels" in body["metadata"]:
            patch["metadata"]["labels"] = body["metadata"]["labels"]
        with self._translate(Target("replace", ns, name, plural)):
            obj = self._conn.call(
                self._custom().patch_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                plural,
                name,
                patch,
            )
        return dict(obj)

    def _list(
        self, ns: str | None, plural: str, label_selector: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        self._require_crd(plural)
        api = self._custom()
        extra = {"label_selector": label_selector} if label_selector else {}
        with self._translate(Target("list", ns, None, plural)):
            if ns is None:
                out = self._conn.call(
                    api.list_cluster_custom_object, GROUP, VERSION, plural, read=True, **extra
                )
            else:
                out = self._conn.call(
                    api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    ns,
                    plural,
                    read=True,
                    **extra,
                )
        return [dict(item) for item in out.get("items") or []]

    def _delete(
        self, name: str, ns: str, plural: str, wait: bool, timeout: float, poll_interval: float
    ) -> None:
        """Delete (background, or foreground and poll until gone with ``wait``)."""
        self._require_crd(plural)
        target = Target("delete", ns, name, plural)
        policy = "Foreground" if wait else "Background"
        with self._translate(target):
            self._conn.call(
                self._custom().delete_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                plural,
                name,
                propagation_policy=policy,
            )
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._get_object(name, ns, plural)
            except (ExperimentNotFound, StudyNotFound):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"{target.what} in namespace {ns} still exists {timeout:g}s after "
                    "deletion (its children are still being deleted, or a finalizer blocks it)"
                )
            time.sleep(min(poll_interval, left))

    def _require_crd(self, plural: str = PLURAL) -> None:
        """Check discovery once per client and resource: ``sarl.dev/v1alpha1`` must serve
        ``plural`` (``experiments``, ``studies``).

        Checked before the first request (as ``kubectl`` does), so a missing CRD is reported
        as such rather than as a bare 404 on whatever was asked."""
        if plural in self._crd_seen:
            return
        from kubernetes.client.exceptions import ApiException

        install = INSTALL_STUDY_CRD if plural == STUDY_PLURAL else INSTALL_CHART
        try:
            with self._translate(Target("discover", None, f"{GROUP}/{VERSION}", "APIs")):
                found = self._conn.call(self._custom().get_api_resources, GROUP, VERSION, read=True)
        except ClusterError as e:
            cause = e.__cause__
            if isinstance(cause, ApiException) and cause.status == 404:
                raise CrdNotInstalled(install) from e
            raise
        names = {r.name for r in (found.resources or [])}
        if plural not in names:
            raise CrdNotInstalled(install)
        self._crd_seen.add(plural)

    @contextmanager
    def _translate(self, target: Target) -> Iterator[None]:
        """Turn ``kubernetes``/urllib3 exceptions raised inside into ``ClusterError``s."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except (ApiException, HTTPError) as e:
            err = api_error(e, target, self._conn.host)
            if isinstance(err, ExperimentNotFound | StudyNotFound):
                self._crd_seen.discard(target.resource)  # a 404 may mean the CRD went away
                self._require_crd(target.resource)
            raise err from e
