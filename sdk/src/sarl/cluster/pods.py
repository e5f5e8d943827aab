"""Find the training pod of an Experiment (waiting for it to start when asked) and read its log.

Used by :meth:`sarl.cluster.client.ClusterClient.logs`. The operator runs an Experiment
``NAME`` as the Kubeflow ``PyTorchJob`` ``NAME``; the Training Operator labels its pods with
``training.kubeflow.org/job-name=NAME``, ``training.kubeflow.org/replica-type=master|worker``
(lower case) and ``training.kubeflow.org/replica-index=I`` (the constants of the
``kubeflow-training`` SDK). Run as a Kubeflow Trainer v2 ``TrainJob`` ``NAME``, the pods are
those of its JobSet (JobSet v0.12.0 ``jobset.sigs.k8s.io/jobset-name=NAME``,
``jobset.sigs.k8s.io/replicatedjob-name=node``) whose Indexed Job gives each one
``batch.kubernetes.io/job-completion-index=<node rank>`` (a pod label since Kubernetes 1.28), the
rank the trainers read: the PyTorchJob's Master is node rank 0, Worker ``i`` node rank ``i + 1``.
Pods without either set of labels (another job runner) are found by the operator's own
pod-template labels ``sarl.dev/experiment=NAME`` + ``app.kubernetes.io/component=trainer`` and the
Training Operator's pod name ``NAME-<replica>-<index>``.

The label selector is sent to the API server; matches are checked again here, which costs
nothing and keeps the choice right where a server ignores selectors (the test server does).

A read may be bounded in time (``timeout``, for notebooks and scripts that follow a log for a
while): each socket read then waits at most until the deadline, and the lines end there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, suppress
from typing import TYPE_CHECKING, Any, Final

from sarl.cluster.errors import NoPod, Target
from sarl.cluster.models import TERMINAL_PHASES

if TYPE_CHECKING:
    from sarl.cluster.connection import Connection
    from sarl.cluster.models import ExperimentInfo

JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
EXPERIMENT_LABEL: Final = "sarl.dev/experiment"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"
#: The replicated job (and container) of the trainer nodes in sarl's ClusterTrainingRuntime.
TRAINJOB_NODE: Final = "node"
#: The trainer container of a PyTorchJob replica and of a TrainJob node (see operator builders).
TRAINER_CONTAINERS: Final = ("pytorch", TRAINJOB_NODE)


def operator_selector(job: str, replica: str, index: int) -> dict[str, str]:
    """Labels the Training Operator puts on replica ``replica`` #``index`` of ``job``."""
    return {
        JOB_NAME_LABEL: job,
        REPLICA_TYPE_LABEL: replica.lower(),
        REPLICA_INDEX_LABEL: str(index),
    }


def node_rank(replica: str, index: int) -> int:
    """The node rank of PyTorchJob replica ``replica`` #``index``: Master 0, Worker i -> i + 1
    (the Training Operator's ``RANK``)."""
    return index if replica.lower() == "master" else index + 1


def trainjob_selector(job: str, replica: str, index: int) -> dict[str, str]:
    """Labels of the TrainJob ``job``'s pod at the node rank of ``replica`` #``index``."""
    return {
        JOBSET_NAME_LABEL: job,
        REPLICATED_JOB_LABEL: TRAINJOB_NODE,
        COMPLETION_INDEX_LABEL: str(node_rank(replica, index)),
    }


def sarl_selector(experiment: str) -> dict[str, str]:
    """Labels sarl's operator puts on the trainer pod templates of ``experiment``."""
    return {EXPERIMENT_LABEL: experiment, COMPONENT_LABEL: "trainer"}


def selector_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def matching(pods: Iterable[Any], labels: Mapping[str, str]) -> list[Any]:
    """The pods (``V1Pod``) carrying all ``labels``."""
    out = []
    for pod in pods:
        have = pod.metadata.labels or {}
        if all(have.get(k) == v for k, v in labels.items()):
            out.append(pod)
    return out


def choose(
    operator_pods: list[Any], sarl_pods: list[Any], job: str, replica: str, index: int
) -> Any | None:
    """The pod to read: the job controller's labelled pod, else the sarl-labelled pod named
    ``<job>-<replica>-<index>``; the newest when several match (a replaced pod)."""
    if operator_pods:
        return _newest(operator_pods)
    wanted = f"{job}-{replica.lower()}-{index}"
    named = [p for p in sarl_pods if p.metadata.name == wanted]
    return _newest(named) if named else None


def _newest(pods: list[Any]) -> Any:
    def created(pod: Any) -> str:
        ts = pod.metadata.creation_timestamp
        return ts.isoformat() if ts is not None and hasattr(ts, "isoformat") else str(ts or "")

    return max(pods, key=created)


def started(pod: Any) -> bool:
    """Whether the pod's containers were started (its log can be read): past ``Pending``. A pod
    without a reported phase counts as started (the API server always reports one)."""
    phase = getattr(pod.status, "phase", None) if pod.status is not None else None
    return phase != "Pending"


def container_of(pod: Any) -> str | None:
    """The container to read: the trainer's (``pytorch`` or ``node``) when the pod has several,
    else the only one."""
    names = [c.name for c in (pod.spec.containers or [])] if pod.spec else []
    if len(names) > 1:
        for name in TRAINER_CONTAINERS:
            if name in names:
                return name
    return None


def lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Split a byte stream into text lines (without the newline), the last one even without
    a trailing newline; bytes that are not UTF-8 are replaced, never fatal."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk)
        *complete, pending = pending.split("\n")
        yield from complete
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def chunks_until(resp: Any, deadline: float) -> Iterator[bytes]:
    """The body chunks of ``resp`` (a streaming urllib3 response) until the ``time.monotonic()``
    ``deadline``: before each read the socket's timeout is set to the time left, so a silent
    stream (a following log) ends at the deadline instead of blocking. Ends early when the body
    does; other read errors propagate."""
    from urllib3.exceptions import ReadTimeoutError

    sock = getattr(resp.connection, "sock", None)
    before = sock.gettimeout() if sock is not None else None
    chunks = resp.stream(8192)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if sock is not None:
                sock.settimeout(left)
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except ReadTimeoutError:
                # With the socket's timeout set above this is the deadline; without a socket
                # to set (another transport), the request's read timeout fired: an error.
                if sock is not None or time.monotonic() >= deadline:
                    return
                raise
            yield chunk
    finally:
        if sock is not None:  # a connection that goes back to the pool keeps its own timeout
            with suppress(OSError):
                sock.settimeout(before)


class PodLogs:
    """Finds the training pod and streams its log through the client's connection;
    ``translate`` turns API exceptions into ``ClusterError``s (the client's own mapping)."""

    def __init__(
        self, conn: Connection, translate: Callable[[Target], AbstractContextManager[None]]
    ) -> None:
        self._conn = conn
        self._translate = translate

    def experiment_log(
        self,
        read: Callable[[], ExperimentInfo],
        name: str,
        ns: str,
        *,
        replica: str,
        index: int,
        wait: float,
        poll: float,
        on_wait: Callable[[ExperimentInfo], None] | None,
        follow: bool,
        tail: int | None,
        timeout: float | None,
    ) -> Iterator[str]:
        """The log of the training pod of Experiment ``name`` (``read`` gets the Experiment),
        as :meth:`sarl.cluster.client.ClusterClient.logs` describes: looked up now, or with
        ``wait`` > 0 polled every ``poll`` seconds until the pod exists and left ``Pending``;
        ``NoPod`` with the Experiment's phase when there is none by then."""
        deadline = time.monotonic() + wait
        while True:
            info = read()
            pod = self.find(name, ns, replica, index)
            if pod is not None and (wait <= 0 or started(pod)):
                return self.lines(pod, ns, follow=follow, tail=tail, timeout=timeout)
            ended = info.phase in TERMINAL_PHASES and pod is None
            if wait <= 0 or ended or time.monotonic() >= deadline:
                raise NoPod(
                    f"no {replica} pod (index {index}) of experiment {name} in namespace {ns} "
                    f"yet (phase: {info.phase or 'not picked up by the operator yet'})"
                )
            if on_wait is not None:
                on_wait(info)
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))

    def find(self, job: str, ns: str, replica: str, index: int) -> Any | None:
        """The pod to read (see :func:`choose`), or None when there is none yet."""
        for selector in (
            operator_selector(job, replica, index),
            trainjob_selector(job, replica, index),
        ):
            candidates = matching(self._list(ns, selector), selector)
            if candidates:
                return choose(candidates, [], job, replica, index)
        by_sarl = sarl_selector(job)
        return choose([], matching(self._list(ns, by_sarl), by_sarl), job, replica, index)

    def _list(self, ns: str, labels: dict[str, str]) -> list[Any]:
        from kubernetes import client

        core = client.CoreV1Api(self._conn.api)
        with self._translate(Target("list", ns, resource="pods")):
            found = self._conn.call(
                core.list_namespaced_pod, ns, label_selector=selector_text(labels), read=True
            )
        return list(found.items or [])

    def lines(
        self,
        pod: Any,
        ns: str,
        *,
        follow: bool,
        tail: int | None,
        timeout: float | None = None,
    ) -> Iterator[str]:
        """The request is made now (errors raise here); lines are read as they are consumed,
        until ``timeout`` seconds from now when given (see :func:`chunks_until`)."""
        from kubernetes import client

        deadline = None if timeout is None else time.monotonic() + timeout
        core = client.CoreV1Api(self._conn.api)
        name = pod.metadata.name
        target = Target("read logs of", ns, name, resource="pods")
        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False}
        if tail is not None:
            kwargs["tail_lines"] = tail
        container = container_of(pod)
        if container:
            kwargs["container"] = container
        if follow and deadline is None:  # a training pod may print nothing for minutes
            kwargs["_request_timeout"] = (self._conn.timeout[0], None)
        # With a deadline the request keeps its read timeout (for the response's headers);
        # chunks_until then lets each read of the body wait until the deadline.
        with self._translate(target):
            resp = self._conn.call(core.read_namespaced_pod_log, name, ns, read=True, **kwargs)
        return self._stream(resp, target, deadline)

    def _stream(self, resp: Any, target: Target, deadline: float | None) -> Iterator[str]:
        ended = False
        try:
            with self._translate(target):
                chunks = resp.stream(8192) if deadline is None else chunks_until(resp, deadline)
                yield from lines(chunks)
            ended = resp.isclosed()
        finally:
            if not ended:
                # Stopped mid-body (deadline, an error, or the caller stopped iterating): the
                # connection holds the rest of a stream and must not go back to the pool.
                resp.close()
            resp.release_conn()
