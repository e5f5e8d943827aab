"""Sample rewards under a hostile mix, against a real reward service over real sockets (issue 38
items 4 and 5): cheap and expensive rewards are admitted apart, group rewards are refused over
``--max-group-size``, and a group request whose client leaves keeps its slot until its CPU work
has stopped.

One ``sarl serve reward`` subprocess with one slot and no queue per lane (``--max-concurrency 1
--max-queue 0``), so a slot held is seen at once as a 503 ``queue_full``. The slow work is real:
math-verify items that spin to their timeout (as in ``test_math_verify_service.py``) and a TTRL
group whose answers are compared with each other. Asserted: statuses, error types, the
in-flight gauge and the service's CPU time from ``/proc`` (counts, not durations); the waits
are bounded generously and only keep a broken service from hanging the suite.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sarl_services.testing import ServiceProcess, running_service

pytest.importorskip("math_verify")
pytestmark = pytest.mark.slow  # a real service subprocess

HOSTILE = {"response": "\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "ground_truth": "3"}
ARGS = [
    "--embedder", "openai", "--embedding-url", "http://127.0.0.1:9", "--embedding-model", "x",
    "--max-concurrency", "1", "--max-queue", "0", "--max-group-size", "256",
]  # fmt: skip
BOUND_S = 60.0


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with running_service("reward", ARGS, log_dir=tmp_path_factory.mktemp("lanes")) as s:
        yield s


def _wait(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + BOUND_S  # against hanging; not a timing assertion
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _in_flight(service: ServiceProcess) -> float:
    for line in httpx.get(service.url + "/metrics", timeout=10.0).text.splitlines():
        if line.startswith("sarl_reward_in_flight "):
            return float(line.split()[-1])
    return 0.0


def _send_and_keep(service: ServiceProcess, path: str, body: dict[str, object]) -> socket.socket:
    """POST ``body`` on a raw socket left open (the caller closes it: a client that leaves)."""
    host, port = service.url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process and its threads (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ttrl_group(size: int) -> list[dict[str, object]]:
    # Distinct answers: TTRL's vote compares each with the others (work grows with size^2).
    return [
        {"response": f"so \\boxed{{{i * 7919 + 13}/{i + 3} + \\sqrt{{{i}}}}}", "group": "g"}
        for i in range(size)
    ]


def test_math_verify_work_does_not_hold_up_ground_truth(service: ServiceProcess) -> None:
    """A hostile math-verify request holds the expensive lane's one slot; ``ground_truth``
    requests sent meanwhile are scored (before: one queue and one set of slots for every
    sample reward, so they were refused with 503 until the verifier was done)."""
    # Five items, each spinning until the worker's memory cap or timer (about 2 s each here).
    slow = {"requests": [HOSTILE] * 5, "settings": {"timeout_seconds": 10}}
    client = _send_and_keep(service, "/v1/rewards/ground_truth_math_verify", slow)
    try:
        assert _wait(lambda: _in_flight(service) >= 1)
        cheap = {"requests": [{"response": "\\boxed{2}", "ground_truth": "2"}]}
        for _ in range(3):
            answer = httpx.post(service.url + "/v1/rewards/ground_truth", json=cheap, timeout=30)
            assert answer.status_code == 200, answer.text[:300]
            assert answer.json()["results"][0]["score"] == 1.0
        refused = httpx.post(service.url + "/v1/rewards/ttrl", json={"requests": _ttrl_group(2)})
        assert refused.status_code == 503  # the expensive lane itself is still full
    finally:
        client.close()
    assert _wait(lambda: _in_flight(service) == 0)


def test_a_group_over_max_group_size_is_refused_up_front(service: ServiceProcess) -> None:
    """Before: any group up to --max-items (1,024) was scored, 90-101 s for one group."""
    for reward in ("ttrl", "empo"):
        body = {"requests": _ttrl_group(257)}
        answer = httpx.post(f"{service.url}/v1/rewards/{reward}", json=body, timeout=30.0)
        assert answer.status_code == 413, answer.text[:300]
        assert "--max-group-size" in answer.json()["error"]["message"]
    split = [{**item, "group": i % 2} for i, item in enumerate(_ttrl_group(300))]
    answer = httpx.post(f"{service.url}/v1/rewards/ttrl", json={"requests": split}, timeout=60.0)
    assert answer.status_code == 200, answer.text  # two groups of 150 are within the limit


def test_a_left_group_request_holds_its_slot_until_its_cpu_work_ends(
    service: ServiceProcess,
) -> None:
    """A TTRL group of 256 (one chunk of CPU work, seconds long) whose client leaves at once:
    its slot stays held while the chunk runs (a request sent meanwhile is refused, 503), and
    once the slot is free the service burns no more CPU. Before: the slot was freed at once,
    the next request was admitted beside the work still burning (30 CPU-seconds in the
    red-team run)."""
    client = _send_and_keep(service, "/v1/rewards/ttrl", {"requests": _ttrl_group(256)})
    assert _wait(lambda: _in_flight(service) >= 1)
    client.close()  # the client leaves while its group is being scored
    time.sleep(0.3)  # the service notices the close (its disconnect watcher is immediate)
    behind = httpx.post(service.url + "/v1/rewards/ttrl", json={"requests": _ttrl_group(2)})
    assert behind.status_code == 503, behind.text[:300]
    assert behind.json()["error"]["type"] == "overloaded"
    assert _wait(lambda: _in_flight(service) == 0)
    before = _cpu_s(service.process.pid)
    time.sleep(1.0)
    assert _cpu_s(service.process.pid) - before < 0.5  # idle: the group's work has ended
