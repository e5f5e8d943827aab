"""The embedding service keeps a decoded request in the body budget until it is answered
(issue 38 item 3, as tests/services/test_decoded_bodies_budget.py shows for the reward service).

Before, ``/v1/embeddings`` gave the budget (8 x ``--max-body-bytes``) back as soon as a body was
decoded, so decoded requests waiting for a forward pass were held outside it, any number of
them. A real ``sarl serve embedding`` subprocess (``--max-body-bytes`` 512 KiB: a 4 MiB budget)
is told to gather a pass of 128 texts for up to 10 s (``--batch-wait-ms 10000``), so requests of
one text each wait decoded for the pass; ten 448 KiB requests are sent one at a time, each
once the one before is queued (the service's ``sarl_embedding_queued_texts`` gauge) or
answered, so bodies are never read at once: only decoded requests held while queued contend for
the budget. Before, all ten were queued (4.4 MiB of decoded text past a 4 MiB budget) and
answered 200; now those past the budget wait briefly and get 503 ``overloaded`` unread.
Assertions are on status codes and error bodies (checked against the handler before this
change: all ten were 200).
"""

from __future__ import annotations

import threading
import time

import httpx
import orjson
import pytest

from sarl_services.testing import ServiceProcess, running_service
from tests.services.test_body_memory import MiB

pytestmark = pytest.mark.slow  # a real service subprocess

ARGS = [
    "--max-body-bytes", str(MiB // 2), "--max-input-chars", str(MiB // 2),
    "--max-batch-size", "128", "--batch-wait-ms", "10000", "--deadline-s", "600",
]  # fmt: skip
REQUESTS = 10
TEXT_CHARS = 448 * 1024


def _post(url: str, body: bytes, into: list[httpx.Response]) -> None:
    into.append(httpx.post(url, content=body, headers={"content-type": "application/json"},
                           timeout=120))  # fmt: skip


def _queued(service: ServiceProcess) -> float:
    for line in httpx.get(service.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("sarl_embedding_queued_texts "):
            return float(line.split()[-1])
    return 0.0


def test_decoded_requests_waiting_for_a_pass_count_against_the_budget() -> None:
    with running_service("embedding", ARGS) as service:
        url = service.url + "/v1/embeddings"
        responses: list[httpx.Response] = []
        threads: list[threading.Thread] = []
        for i in range(REQUESTS):
            # One word of 448 KiB: decoded as 448 KiB of text, tokenized as one [UNK].
            text = f"{i:02d}" + "x" * TEXT_CHARS
            body = orjson.dumps({"input": [text]})
            threads.append(threading.Thread(target=_post, args=(url, body, responses)))
            threads[-1].start()
            deadline = time.monotonic() + 60
            while (
                _queued(service) < i + 1 and threads[-1].is_alive() and time.monotonic() < deadline
            ):
                time.sleep(0.02)
        for thread in threads:
            thread.join()
    statuses = [r.status_code for r in responses]
    refused = [r for r in responses if r.status_code == 503]
    assert refused, f"all {REQUESTS} decoded requests were queued outside the budget: {statuses}"
    assert set(statuses) <= {200, 503}, statuses
    for r in refused:
        assert r.json()["error"]["type"] == "overloaded"
        assert "request bodies being read and decoded" in r.json()["error"]["message"]
