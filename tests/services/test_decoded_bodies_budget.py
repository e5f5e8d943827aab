"""Decoded request bodies stay in the body budget until their request is answered (issue 38
item 3).

The budget (:class:`sarl_services.limits.BodyBudget`, 8 x ``--max-body-bytes``) used to be
given back as soon as a body was decoded, so decoded requests waiting for a scoring slot were
held outside it, any number of them (60 x 4 MiB structure requests: +854 MiB). A real
``sarl serve reward`` subprocess (``--max-body-bytes`` 4 MiB: a 32 MiB budget;
``--max-concurrency 1``) has its only slot held by one request whose embedding call the test's
embedding server delays (a loopback fake: the slow embedder is the load, nothing is timed);
sixteen 3 MiB requests then arrive. Before, all sixteen were decoded and queued (96 MiB of
decoded text held); now those past the budget wait briefly and get 503 ``overloaded`` unread.
Assertions are on status codes and error bodies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from sarl_services.testing import ServiceProcess, running_service
from tests.services.test_body_memory import MiB
from tests.support.embedding_server import EmbeddingServer, Fault, running_embedding_server

pytestmark = pytest.mark.slow  # real service subprocesses


def _post(url: str, body: bytes, into: list[httpx.Response] | None = None) -> None:
    response = httpx.post(url, content=body, headers={"content-type": "application/json"},
                          timeout=120)  # fmt: skip
    if into is not None:
        into.append(response)


def _queued(service: ServiceProcess) -> float:
    for line in httpx.get(service.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("sarl_reward_queued "):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture
def slow_embedder() -> Iterator[EmbeddingServer]:
    with running_embedding_server(faults=lambda _: Fault.delay(20.0)) as server:
        yield server


def test_decoded_bodies_waiting_for_a_slot_count_against_the_budget(
    slow_embedder: EmbeddingServer, tmp_path: object
) -> None:
    args = [
        "--embedder", "openai", "--embedding-url", slow_embedder.url, "--embedding-model", "m",
        "--embedding-max-retries", "0", "--embedding-timeout", "60",
        "--max-concurrency", "1", "--max-body-bytes", str(4 * MiB),
    ]  # fmt: skip
    with running_service("reward", args) as service:
        url = service.url + "/v1/rewards/structure"
        blocker = orjson.dumps({"requests": [{"response": "One step.\n\nAnother step."}]})
        first = threading.Thread(target=_post, args=(url, blocker))
        first.start()
        # The blocker's request reaches its (delayed) embedding call before the others are sent.
        deadline = time.monotonic() + 60
        while slow_embedder.stats.requests < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        # Items given as labels: nothing to embed, so each waits only for the slot. Sent one
        # at a time, each once the previous is queued or answered, so the budget is never
        # contended by bodies being read at once, only by decoded bodies held while queued.
        item = {"step_labels": [0, 1], "padding": "x" * (3 * MiB)}
        waiting = orjson.dumps({"requests": [item]})
        responses: list[httpx.Response] = []
        threads = []
        for i in range(16):
            threads.append(threading.Thread(target=_post, args=(url, waiting, responses)))
            threads[-1].start()
            deadline = time.monotonic() + 60
            while (
                _queued(service) < i + 1 and threads[-1].is_alive() and time.monotonic() < deadline
            ):
                time.sleep(0.05)
        for thread in [first, *threads]:
            thread.join()
    statuses = [r.status_code for r in responses]
    refused = [r for r in responses if r.status_code == 503]
    assert refused, f"all 16 decoded requests were queued outside the budget: {statuses}"
    for r in refused:
        assert r.json()["error"]["type"] == "overloaded"
        assert "request bodies being read and decoded" in r.json()["error"]["message"]
