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

This class is the public face; the work is done by one module per concern:
:mod:`~sarl.cluster.connection` (kubeconfig or service account, timed calls),
:mod:`~sarl.cluster.documents` (local validation, custom objects, merge patches),
:mod:`~sarl.cluster.resources` (the custom-object requests and their errors),
:mod:`~sarl.cluster.waiting` (polling for a phase or for deletion) and
:mod:`~sarl.cluster.pods` (the training pod and its log).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final, overload

from sarl.cluster import pods
from sarl.cluster.connection import Connection, connect
from sarl.cluster.documents import (
    ExperimentSource,
    StudySource,
    experiment_body,
    is_study_source,
    load_for_cluster,
    load_study_for_cluster,
    merge_patch,
    study_body,
)
from sarl.cluster.errors import AlreadyExists
from sarl.cluster.models import ExperimentInfo, ExperimentStatus, StudyInfo
from sarl.cluster.resources import GROUP, PLURAL, STUDY_PLURAL, VERSION, CustomObjects
from sarl.cluster.waiting import Info, OnPoll, OnStudyPoll, wait_for_phase, wanted_phases
from sarl.spec.experiment import Experiment
from sarl.spec.loader import SpecError, load_document
from sarl.spec.study import LABEL_STUDY, Study

#: (connect, read) seconds per request.
DEFAULT_TIMEOUT: Final = (5.0, 30.0)

# The names this module offered before it was split, kept importable from here (notebook 03 and
# tests do ``from sarl.cluster.client import ...``); those imported above are defined there.
__all__ = [
    "DEFAULT_TIMEOUT",
    "GROUP",
    "PLURAL",
    "STUDY_PLURAL",
    "VERSION",
    "ClusterClient",
    "ExperimentSource",
    "OnPoll",
    "OnStudyPoll",
    "StudySource",
    "experiment_body",
    "is_study_source",
    "load_for_cluster",
    "load_study_for_cluster",
    "merge_patch",
    "study_body",
    "wanted_phases",
]


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
        self._objects = CustomObjects(self._conn)
        self._pods = pods.PodLogs(self._conn, self._objects.translate)

    @property
    def namespace(self) -> str:
        """The namespace used when a call names none."""
        return self._conn.namespace

    @property
    def host(self) -> str:
        """The API server's URL."""
        return self._conn.host

    # ---- Experiments ----

    @staticmethod
    def validate(experiment: ExperimentSource, *, name: str | None = None) -> Experiment:
        """The Experiment as :meth:`submit` validates it before any request (the operator's
        checks: trainer, resource plan; ``SpecError`` naming the field); no request is made.
        ``name`` replaces ``metadata.name`` (its name on the cluster)."""
        if name is not None:
            if isinstance(experiment, Experiment):
                data = experiment.model_dump(mode="json", exclude_unset=True)
            else:
                data, _ = load_document(experiment)
            metadata = data.get("metadata")
            experiment = {**data, "metadata": {**(metadata or {}), "name": name}}
        return load_for_cluster(experiment)[0]

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
            obj = self._objects.create(body, PLURAL)
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
        return ExperimentInfo.from_object(
            self._objects.replace(experiment_body(exp, ns, spec), PLURAL)
        )

    def get(self, name: str, *, namespace: str | None = None) -> ExperimentInfo:
        """The Experiment ``name`` (``ExperimentNotFound`` if absent)."""
        return ExperimentInfo.from_object(self._objects.get(name, self._ns(namespace)))

    def status(self, name: str, *, namespace: str | None = None) -> ExperimentStatus:
        """Only the status of the Experiment ``name``."""
        return self.get(name, namespace=namespace).status

    def list(
        self, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> builtins.list[ExperimentInfo]:
        """Experiments in ``namespace`` (or in every namespace), sorted by namespace and name."""
        return self._list(ExperimentInfo, PLURAL, namespace, all_namespaces)

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
        return self._wait(
            "experiment", self.get, name, namespace, until, timeout, poll_interval, on_poll
        )

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
        self._objects.delete(name, self._ns(namespace), PLURAL, wait, timeout, poll_interval)

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
            obj = self._objects.create(study_body(parsed, ns, spec), STUDY_PLURAL)
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
        return StudyInfo.from_object(
            self._objects.replace(study_body(parsed, ns, spec), STUDY_PLURAL)
        )

    def get_study(self, name: str, *, namespace: str | None = None) -> StudyInfo:
        """The Study ``name`` (``StudyNotFound`` if absent)."""
        return StudyInfo.from_object(self._objects.get(name, self._ns(namespace), STUDY_PLURAL))

    def list_studies(
        self, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> builtins.list[StudyInfo]:
        """Studies in ``namespace`` (or in every namespace), sorted by namespace and name."""
        return self._list(StudyInfo, STUDY_PLURAL, namespace, all_namespaces)

    def study_runs(
        self, name: str, *, namespace: str | None = None
    ) -> builtins.list[ExperimentInfo]:
        """The Experiments of the Study ``name`` (label ``sarl.dev/study``), sorted by name."""
        ns = self._ns(namespace)
        selector = f"{LABEL_STUDY}={name}"
        items = self._objects.items(ns, PLURAL, label_selector=selector)
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
        return self._wait(
            "study", self.get_study, name, namespace, until, timeout, poll_interval, on_poll
        )

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
        self._objects.delete(name, self._ns(namespace), STUDY_PLURAL, wait, timeout, poll_interval)

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
        return self._pods.experiment_log(
            lambda: self.get(name, namespace=ns),
            name,
            ns,
            replica=replica,
            index=index,
            wait=wait,
            poll=poll,
            on_wait=on_wait,
            follow=follow,
            tail=tail,
            timeout=timeout,
        )

    # ---- internals ----

    def _ns(self, namespace: str | None) -> str:
        return namespace or self._conn.namespace

    def _list(
        self, info: type[Info], plural: str, namespace: str | None, all_namespaces: bool
    ) -> builtins.list[Info]:
        """``list`` and ``list_studies``: the objects of ``plural`` as ``info``, sorted."""
        ns = None if all_namespaces else self._ns(namespace)
        infos = [info.from_object(item) for item in self._objects.items(ns, plural)]
        return sorted(infos, key=lambda i: (i.namespace, i.name))

    def _wait(
        self,
        noun: str,
        get: Callable[..., Info],
        name: str,
        namespace: str | None,
        until: str | Iterable[str] | None,
        timeout: float,
        poll_interval: float,
        on_poll: Callable[[Info], None] | None,
    ) -> Info:
        """``wait`` and ``wait_study``: poll ``get(name)`` until the phase is in ``until``."""
        wanted = wanted_phases(until)
        ns = self._ns(namespace)
        return wait_for_phase(
            lambda: get(name, namespace=ns),
            f"{noun} {name} in namespace {ns}",
            wanted,
            timeout=timeout,
            poll_interval=poll_interval,
            on_poll=on_poll,
        )

    def _submit_namespace(self, exp: Experiment | Study, namespace: str | None) -> str:
        """``namespace`` > ``metadata.namespace`` > the client's; a conflict is an error (as
        with ``kubectl apply -n``)."""
        if namespace and exp.metadata.namespace and namespace != exp.metadata.namespace:
            raise SpecError(
                f"metadata.namespace={exp.metadata.namespace!r} does not match the namespace "
                f"{namespace!r} given"
            )
        return namespace or exp.metadata.namespace or self._conn.namespace
