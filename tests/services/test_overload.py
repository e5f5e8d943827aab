"""Reward service under load and with a failing embedder (fake embedding server in-process)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.services.conftest import FakeStack
from tests.support.embedding_server import Fault

pytestmark = pytest.mark.slow  # real service subprocesses (started once per session)

TEXT_ITEM = {"response": "<think>first step\n\nsecond step</think> done"}


async def _burst(url: str, n: int) -> tuple[list[httpx.Response], dict[str, float]]:
    """Send ``n`` requests at once; sample the in-flight/queued gauges while they run."""
    async with httpx.AsyncClient(timeout=30) as client:
        tasks = [
            asyncio.create_task(
                client.post(f"{url}/v1/rewards/structure", json={"requests": [TEXT_ITEM]})
            )
            for _ in range(n)
        ]
        await asyncio.sleep(0.5)  # the first request is now waiting on the slow embedder
        gauges = {
            line.split()[0]: float(line.split()[1])
            for line in (await client.get(f"{url}/metrics")).text.splitlines()
            if line.startswith(("sarl_reward_in_flight ", "sarl_reward_queued "))
        }
        return list(await asyncio.gather(*tasks)), gauges


def test_excess_requests_wait_then_get_503_with_retry_after(fake_stack: FakeStack) -> None:
    fake_stack.embedder.set_faults(lambda _: Fault.delay(1.0))
    responses, gauges = asyncio.run(_burst(fake_stack.reward.url, 4))
    # --max-concurrency 1 --max-queue 1: one scores, one waits, the rest are refused at once.
    assert sorted(r.status_code for r in responses) == [200, 200, 503, 503]
    assert gauges == {"sarl_reward_in_flight": 1.0, "sarl_reward_queued": 1.0}
    for refused in (r for r in responses if r.status_code == 503):
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error"]["type"] == "overloaded"
    assert fake_stack.embedder.stats.max_in_flight == 1


def test_embedder_failure_is_502_naming_the_endpoint(fake_stack: FakeStack) -> None:
    fake_stack.embedder.set_faults(lambda _: Fault.error(500, "model crashed"))
    url = f"{fake_stack.reward.url}/v1/rewards/structure"
    failed = httpx.post(url, json={"requests": [{"step_labels": [0, 1]}, TEXT_ITEM]})
    assert failed.status_code == 502
    error = failed.json()["error"]
    assert error["type"] == "upstream_error"
    assert fake_stack.embedder.url in error["message"] and "model crashed" in error["message"]
    # Items that need no embedding are still scored while the embedder is down.
    labels_only = httpx.post(url, json={"requests": [{"step_labels": [0, 1, 0]}]})
    assert labels_only.status_code == 200
    assert labels_only.json()["results"][0]["num_nodes"] == 2


def test_fake_embedder_vectors_flow_through(fake_stack: FakeStack) -> None:
    response = httpx.post(
        f"{fake_stack.reward.url}/v1/rewards/structure", json={"requests": [TEXT_ITEM] * 3}
    )
    assert response.status_code == 200
    assert [r["num_steps"] for r in response.json()["results"]] == [2, 2, 2]
    assert fake_stack.embedder.stats.texts == 2  # distinct steps of the batch, embedded once
