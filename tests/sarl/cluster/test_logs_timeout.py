"""ClusterClient.logs(timeout=...): a log read (following, or not) ends at its deadline.

A notebook cell that follows a training log for a while must end even when the pod prints
nothing. The in-memory API server (tests.support.kube_server, see conftest) serves a log as one
finished response, so here the log of one pod is replaced by a stream that sends some bytes and
then stays open without sending more (as a quiet training pod's followed log does), through
kmock's own streaming reactions."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kmock
import pytest
from kubernetes import client as k8s
from kubernetes import config

from sarl.cluster import ClusterClient
from sarl.cluster.pods import chunks_until
from tests.sarl.cluster.conftest import experiment_doc
from tests.support.kube_server import KubeServer

MASTER = {
    "training.kubeflow.org/job-name": "job",
    "training.kubeflow.org/replica-type": "master",
    "training.kubeflow.org/replica-index": "0",
}


@pytest.fixture
def quiet_log(server: KubeServer, kubeconfig: Path, ns: str) -> Iterator[None]:
    """Experiment ``job`` whose master pod's log sends ``step 1\\nstep 2\\npartial`` and then
    nothing, the connection held open until the test ends."""
    released = asyncio.Event()

    async def quiet() -> AsyncIterator[bytes]:
        yield b"step 1\nstep 2\npartial"
        await released.wait()

    try:
        with _streamed_log(server, kubeconfig, ns, quiet):
            yield
    finally:
        server.call(lambda em: released.set())  # the server's handler ends (a clean shutdown)


@pytest.fixture
def busy_log(server: KubeServer, kubeconfig: Path, ns: str) -> Iterator[None]:
    """Experiment ``job`` whose master pod's log never ends: ``step N`` every 50 ms."""

    async def busy() -> AsyncIterator[bytes]:
        for step in itertools.count(1):
            yield f"step {step}\n".encode()
            await asyncio.sleep(0.05)

    with _streamed_log(server, kubeconfig, ns, busy):
        yield


@contextmanager
def _streamed_log(
    server: KubeServer, kubeconfig: Path, ns: str, body: Callable[[], AsyncIterator[bytes]]
) -> Iterator[None]:
    """Experiment ``job`` and its master pod, whose log is ``body()`` streamed by kmock (a
    reaction, answered instead of the emulator's finished log for this pod only)."""
    from kmock._internal import apps  # kmock's reaction matching, under the emulator's own

    pod_name = "job-master-0"
    ClusterClient(kubeconfig=kubeconfig).submit(experiment_doc("job"))
    api = config.new_client_from_config(config_file=str(kubeconfig))
    pod = {"metadata": {"name": pod_name, "labels": MASTER}, "spec": {"containers": []}}
    k8s.CoreV1Api(api).create_namespaced_pod(ns, pod)

    def install(em: Any) -> None:
        own = em._handle

        async def handle(request: Any) -> Any:
            if (request.subresource, request.namespace, request.name) == ("log", ns, pod_name):
                return await apps.RawHandler._handle(em, request)
            return await own(request)

        em._handle = handle
        em[kmock.subresource("log"), kmock.namespace(ns)] << body

    server.call(install)
    try:
        yield
    finally:
        server.call(lambda em: delattr(em, "_handle"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("follow", [True, False])
def test_a_quiet_log_ends_at_the_timeout(kubeconfig: Path, quiet_log: None, follow: bool) -> None:
    """Silence is not an error until the deadline, even past the request's read timeout (2 s
    here, for the response's headers); the partial last line is kept. The deadline leaves
    seconds for the first bytes: a loaded machine can take over 0.5 s to serve them."""
    client = ClusterClient(kubeconfig=kubeconfig, retries=0, request_timeout=(5.0, 2.0))
    start = time.monotonic()
    lines = list(client.logs("job", follow=follow, timeout=5.0))
    assert lines == ["step 1", "step 2", "partial"]
    assert time.monotonic() - start >= 5.0  # the stream never ended: only the deadline did


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", ["deadline", "caller"])
def test_the_client_works_after_a_stream_stopped_midway(
    kubeconfig: Path, quiet_log: None, stop: str
) -> None:
    """A stream stopped before its end (at the deadline, or by a caller that stopped reading)
    has its connection closed, not pooled: a request reusing it would wait for an answer behind
    the rest of the log, and time out."""
    client = ClusterClient(kubeconfig=kubeconfig, retries=0, request_timeout=(5.0, 5.0))
    if stop == "deadline":
        assert list(client.logs("job", follow=True, timeout=5.0)) == ["step 1", "step 2", "partial"]
    else:
        lines = client.logs("job", follow=True)
        assert next(lines) == "step 1"
        lines.close()  # type: ignore[attr-defined]  # a generator
    for _ in range(3):
        assert client.get("job").name == "job"


@pytest.mark.timeout(120)
def test_a_busy_log_ends_at_the_timeout(kubeconfig: Path, busy_log: None) -> None:
    client = ClusterClient(kubeconfig=kubeconfig, retries=0, request_timeout=(5.0, 5.0))
    start = time.monotonic()
    lines = list(client.logs("job", follow=True, timeout=3.0))
    assert time.monotonic() - start >= 3.0
    assert lines[:2] == ["step 1", "step 2"]  # then as many as came in those seconds
    assert client.get("job").name == "job"  # its connection was not pooled half-read


def test_a_log_that_ends_first_is_read_whole(
    client: ClusterClient, server: KubeServer, kubeconfig: Path, ns: str
) -> None:
    client.submit(experiment_doc("done"))
    api = config.new_client_from_config(config_file=str(kubeconfig))
    labels = {**MASTER, "training.kubeflow.org/job-name": "done"}
    body = {"metadata": {"name": "done-master-0", "labels": labels}, "spec": {"containers": []}}
    k8s.CoreV1Api(api).create_namespaced_pod(ns, body)
    server.set_log(ns, "done-master-0", "a\nb\n")
    assert list(client.logs("done", follow=True, timeout=60)) == ["a", "b"]
    assert client.get("done").name == "done"  # the finished response's connection is reusable


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_timeout_must_be_positive(client: ClusterClient, timeout: float) -> None:
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        client.logs("any", timeout=timeout)


class _Sock:
    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def gettimeout(self) -> float | None:
        return 30.0

    def settimeout(self, value: float | None) -> None:
        self.timeouts.append(value)


class _Response:
    """What chunks_until uses of a urllib3 response: ``connection.sock`` and ``stream``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.connection = type("Conn", (), {"sock": _Sock()})()
        self._chunks = chunks

    def stream(self, amount: int) -> Iterator[bytes]:
        yield from self._chunks


def test_each_read_waits_at_most_until_the_deadline_then_the_timeout_is_restored() -> None:
    resp = _Response([b"a\n", b"b\n"])
    assert list(chunks_until(resp, time.monotonic() + 60)) == [b"a\n", b"b\n"]
    timeouts = resp.connection.sock.timeouts
    # A read per chunk and one finding the end, each waiting at most until the deadline.
    assert len(timeouts) == 4 and all(0 < t <= 60 for t in timeouts[:-1])  # type: ignore[operator]
    assert timeouts[-1] == 30.0  # the pooled connection's own read timeout again


def test_a_passed_deadline_reads_nothing() -> None:
    resp = _Response([b"a\n"])
    assert list(chunks_until(resp, time.monotonic() - 1)) == []
