"""Structure requests that bring their own ``step_embeddings`` pass admission (issue 38 item 3).

They have no text to embed, and admission counted only texts to embed, so they were never
refused however many came (60 requests of 4 MiB: the last answered after 101 s against a 10 s
deadline). Now each given step counts one unit of work. A real ``sarl serve reward`` subprocess
(its embedder never called) is sent eight such requests at once, each far more work than one
deadline at the starting rate estimate (20 units/s): the first is taken best effort and those
arriving while it runs are refused at once with 503 ``overloaded`` + Retry-After (before, every
one was queued and answered 200). Assertions are on status codes and bodies, not seconds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sarl_services.testing import ServiceProcess, running_service
from tests.services.test_body_memory import concurrently

pytestmark = pytest.mark.slow  # a real service subprocess

_ARGS = ["--embedder", "openai", "--embedding-url", "http://127.0.0.1:9"]
_ARGS += ["--embedding-model", "unused"]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    with running_service("reward", _ARGS, log_dir=tmp_path) as s:
        yield s


def _request(seed: int, items: int = 2, steps: int = 400, dim: int = 32) -> bytes:
    rng = random.Random(seed)
    item = {"step_embeddings": [[rng.uniform(-1, 1) for _ in range(dim)] for _ in range(steps)]}
    return orjson.dumps({"requests": [item] * items})


def test_requests_with_given_embeddings_are_admitted_by_their_steps(
    service: ServiceProcess,
) -> None:
    bodies = [_request(seed) for seed in range(8)]
    responses = concurrently(service.url + "/v1/rewards/structure", bodies)
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 503}, statuses
    refused = [r for r in responses if r.status_code == 503]
    assert refused, f"all {len(responses)} requests were queued: {statuses}"
    for r in refused:
        assert r.json()["error"]["type"] == "overloaded"
        assert int(r.headers["retry-after"]) >= 1
    assert 200 in statuses  # the first is served (best effort), not refused for good
    for r in responses:
        if r.status_code == 200:
            assert all("error" not in result for result in r.json()["results"])
