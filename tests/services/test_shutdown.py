"""SIGTERM with a request in flight (issue 38 item 9): a real reward service, a request that
runs past the shutdown grace period (KServe's ``grace_period=10``, uvicorn's
``timeout_graceful_shutdown``), and SIGTERM sent to the service process alone, as Kubernetes
does. Before: uvicorn cancelled the request, which logged a traceback and answered 500. Now the
request is answered 503 ``shutting_down`` with Retry-After, and the log has no traceback.

The request stays in flight for as long as needed, whatever the machine's speed: a
``structure`` request whose embedding endpoint is a real listening socket that never answers
(the service's embedding call waits for its 120 s timeout). Only statuses and the log are
asserted; the bounds are generous and only keep a broken service from hanging the suite.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from sarl_services.testing import start_service

pytestmark = pytest.mark.slow  # a real service subprocess

SLOW = {"requests": [{"response": "First we add the numbers. Then we check the sum."}]}


def test_sigterm_past_the_grace_period_answers_503_without_traceback(tmp_path: Path) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # connections queue; nothing is answered
    args = [
        "--embedder", "openai", "--embedding-model", "x",
        "--embedding-url", f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
        "--embedding-timeout", "120", "--embedding-max-retries", "0",
    ]  # fmt: skip
    service = start_service("reward", args, log_dir=tmp_path)
    answers: list[httpx.Response] = []
    try:
        service.wait_until_ready()
        url = service.url + "/v1/rewards/structure"
        client = threading.Thread(
            target=lambda: answers.append(httpx.post(url, json=SLOW, timeout=120.0))
        )
        client.start()
        deadline = time.monotonic() + 60.0  # against hanging only
        while not _scoring(service.url) and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(service.process.pid, signal.SIGTERM)  # the process alone, not its workers
        client.join(timeout=120.0)
        assert service.process.wait(timeout=60.0) == 0
    finally:
        service.stop()
        silent.close()
    assert len(answers) == 1
    assert answers[0].status_code == 503
    assert answers[0].json()["error"]["type"] == "shutting_down"
    assert answers[0].headers["retry-after"] == "1"
    log = service.log_path.read_text(errors="replace")
    assert "Traceback" not in log
    assert " 500 " not in log


def _scoring(base_url: str) -> bool:
    """Whether the service reports a request being scored (its in-flight gauge)."""
    for line in httpx.get(base_url + "/metrics", timeout=10.0).text.splitlines():
        if line.startswith("sarl_reward_in_flight ") and float(line.split()[-1]) >= 1:
            return True
    return False
