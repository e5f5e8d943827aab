"""``ground_truth_math_verify`` in the real reward service (a subprocess, over HTTP): a hostile
item costs its timeout, warm workers are shared across requests, a request whose client left
has its worker killed, and a cheap request behind a slow queue is refused at once (503).

The hostile item is a real input that makes math-verify spin (SymPy evaluating a tower of
powers) until something stops it. The service's math-verify workers are its child processes,
read from ``/proc/<pid>/task/*/children`` (Linux). Bounds below are generous and only keep a
broken service from hanging the suite; what is asserted is the mechanism (which processes
live, which status comes back while a request is still running).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sarl_services.testing import ServiceProcess, start_service

pytest.importorskip("math_verify")

HOSTILE = {"response": "\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "ground_truth": "3"}
NORMAL = {"response": "\\boxed{0.5}", "ground_truth": "1/2"}
URL = "/v1/rewards/ground_truth_math_verify"
# No embedding is involved: the embedder is never called.
ARGS = ["--embedder", "openai", "--embedding-url", "http://127.0.0.1:9", "--embedding-model", "x"]


def _start(tmp_path: Path) -> ServiceProcess:
    service = start_service("reward", ARGS, log_dir=tmp_path)
    service.wait_until_ready()
    return service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    """A fresh service per test: its cost estimates start from the prior."""
    started = _start(tmp_path)
    yield started
    started.stop()


def workers(service: ServiceProcess) -> set[int]:
    pids: set[int] = set()
    for children in Path(f"/proc/{service.process.pid}/task").glob("*/children"):
        pids |= {int(pid) for pid in children.read_text().split()}
    return pids


def wait_for(condition: Callable[[], bool], limit_s: float = 45.0) -> bool:
    deadline = time.monotonic() + limit_s  # against hanging; not a timing assertion
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_hostile_item_costs_its_timeout_on_shared_warm_workers(service: ServiceProcess) -> None:
    """Before: a new reward (and worker) per request, and the new worker's comparison got 60 s
    of start-up grace on top of the timeout: this request took 61 s (past the client's 30 s),
    and every request's workers were gone with it."""
    # 0.5 s: well before the item reaches the workers' memory cap (about 2 s here), which
    # would end it as a wrong answer rather than a timeout.
    body = {"requests": [HOSTILE, NORMAL], "settings": {"timeout_seconds": 0.5}}
    response = httpx.post(service.url + URL, json=body, timeout=30.0)
    assert response.status_code == 200
    hostile, normal = response.json()["results"]
    assert hostile["verifier_timeout"] == 1.0 and normal["math_verify"] == 1.0
    warm = workers(service)
    assert len(warm) == 2  # a worker and its spare, kept for the next request
    again = httpx.post(service.url + URL, json={"requests": [NORMAL]}, timeout=30.0)
    assert again.json()["results"][0]["score"] == 1.0
    assert workers(service) == warm  # the same processes served it


def test_a_request_over_the_verifier_bound_is_refused_up_front(service: ServiceProcess) -> None:
    body = {"requests": [NORMAL] * 64, "settings": {"timeout_seconds": 10}}  # up to 640 s
    response = httpx.post(service.url + URL, json=body, timeout=30.0)
    assert response.status_code == 413
    assert "split the request" in response.json()["error"]["message"]
    assert workers(service) == set()  # refused before any comparison


def test_left_requests_are_killed_and_cheap_ones_refused_at_once(
    service: ServiceProcess,
) -> None:
    """A hostile item at timeout 10 s: unmeasured, it is expected to take its timeout, more
    than admission plans for, so it runs alone in the expensive lane; another math-verify
    request sent while it runs is refused with 503 + Retry-After at once (before: admitted with
    no expected work, and it waited behind four such requests for 58 s), while a
    ``ground_truth`` request, in the cheap lane, is scored (issue 38: before, it was refused
    too). When the hostile request's client leaves, its
    worker is killed; without that, the worker's timer would stop the comparison after 10 s
    and the worker would live on (before: it ran for 70 s)."""
    # Five items (each ends at the workers' memory cap, about 2 s): still running meanwhile.
    body = json.dumps({"requests": [HOSTILE] * 5, "settings": {"timeout_seconds": 10}}).encode()
    host, port = service.url.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)))  # a client that will leave
    head = f"POST {URL} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    assert wait_for(lambda: len(workers(service)) == 2)  # the comparison's worker and a spare
    started = workers(service)
    behind = httpx.post(service.url + URL, json={"requests": [NORMAL]}, timeout=30.0)
    cheap = httpx.post(
        service.url + "/v1/rewards/ground_truth",
        json={"requests": [NORMAL]},
        timeout=30.0,
    )
    client.setblocking(False)
    with pytest.raises(BlockingIOError):
        client.recv(1)  # the hostile request is still running: no answer yet
    assert behind.status_code == 503 and int(behind.headers["Retry-After"]) >= 1
    assert behind.json()["error"]["type"] == "overloaded"
    assert cheap.status_code == 200
    client.close()  # the client leaves
    assert wait_for(lambda: not started <= workers(service))  # one of them was killed
    assert wait_for(lambda: len(workers(service)) == 2)  # a new spare took its place
