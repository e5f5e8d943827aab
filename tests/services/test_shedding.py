"""Work-based admission on the real routes, in-process: 503 overloaded with Retry-After once the
expected completion passes the deadline, shed requests counted, accepted requests served.

The routes run on this test's event loop (httpx's ASGI transport), the embedding service with a
fake model held inside a pass and the reward service with a fake embedder held inside a call,
so "a request is still being served when the next arrives" is forced, not timed. Rates are set
by hand, so the expected completions below are exact.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from sarl.embedding.base import FloatArray
from sarl_services import embedding, reward
from sarl_services.admission import Admission, RateEstimator
from sarl_services.batching import Batcher, BatchSettings
from sarl_services.metrics import EmbeddingMetrics, RewardMetrics

DIM = 4


def _unit_rows(texts: Sequence[str]) -> FloatArray:
    rows = np.ones((len(texts), DIM), dtype=np.float32) / 2.0  # (texts, dim), unit norm
    return rows


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def _client(router: Any) -> httpx.AsyncClient:
    app = FastAPI()
    app.include_router(router)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


# -- embedding service ------------------------------------------------------------------------


class HeldModel:
    """A fake forward pass that waits until the test releases it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()

    def __call__(self, payloads: list[list[str]]) -> FloatArray:
        self.started.set()
        if not self.go.wait(timeout=60):
            raise TimeoutError("never released")
        return _unit_rows([ids[0] for ids in payloads])  # the fake ids carry their text


def _embedding_model(
    registry: CollectorRegistry, fake: HeldModel, monkeypatch: pytest.MonkeyPatch
) -> embedding.EmbeddingModel:
    settings = embedding.EmbeddingSettings(deadline_s=1.0)
    model = embedding.EmbeddingModel(settings, EmbeddingMetrics.create(registry))
    # 10 tokens/s, planned in full: 4 tokens per text, so 2 texts = 0.8 s of work.
    admission = Admission(1.0, RateEstimator(10.0), fair=True, unit="tokens", headroom=1.0)
    model.batcher = Batcher(fake, admission, BatchSettings(batch_wait_s=0.0))
    # 4 "token ids" per text, each the text itself (what the held model reads back).
    monkeypatch.setattr(model, "_token_ids", lambda texts: [[t] * 4 for t in texts])
    model.dim, model.ready = DIM, True
    return model


def test_embedding_request_past_the_deadline_is_503_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry, fake = CollectorRegistry(), HeldModel()
    model = _embedding_model(registry, fake, monkeypatch)

    async def main() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with _client(embedding.build_router(model)) as client:
            first = asyncio.create_task(client.post("/v1/embeddings", json={"input": ["a", "b"]}))
            await asyncio.to_thread(fake.started.wait, 60)  # "a", "b" are being encoded
            # 8 more tokens: it would finish at (8 + 8) / 10 = 1.6 s, past the 1 s deadline.
            refused = await client.post("/v1/embeddings", json={"input": ["c", "d"]})
            predict = await client.post(
                f"/v1/models/{model.name}:predict", json={"instances": ["e", "f"]}
            )
            fake.go.set()
            return await first, refused, predict

    first, refused, predict = asyncio.run(main())
    assert first.status_code == 200 and len(first.json()["data"]) == 2
    for response in (refused, predict):
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "1"
        error = response.json()["error"]
        assert error["type"] == "overloaded" and error["code"] == 503
        assert "would finish in about 1.6 s" in error["message"]
        assert "deadline of 1 s" in error["message"] and "expected wait 0.8 s" in error["message"]
    assert _sample(registry, "sarl_embedding_shed_total", reason="deadline") == 2
    assert _sample(registry, "sarl_embedding_requests_total", status="503") == 2
    model.batcher.close()


def test_embedding_request_of_texts_already_queued_brings_no_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry, fake = CollectorRegistry(), HeldModel()
    model = _embedding_model(registry, fake, monkeypatch)

    async def main() -> list[httpx.Response]:
        async with _client(embedding.build_router(model)) as client:
            first = asyncio.create_task(client.post("/v1/embeddings", json={"input": ["a", "b"]}))
            await asyncio.to_thread(fake.started.wait, 60)
            # The same texts again: counted as 8 more tokens it would be refused (1.6 s).
            again = asyncio.create_task(client.post("/v1/embeddings", json={"input": ["b", "a"]}))
            await _until(lambda: model.batcher.admission.admitted == 2 or again.done())
            fake.go.set()
            return [await first, await again]

    first, again = asyncio.run(main())
    assert (first.status_code, again.status_code) == (200, 200)
    rows = [d["embedding"] for d in again.json()["data"]]
    assert np.allclose(rows, _unit_rows(["b", "a"]))
    assert _sample(registry, "sarl_embedding_shed_total", reason="deadline") == 0
    model.batcher.close()


async def _until(condition: Any) -> None:
    """Wait (polling the event loop) until ``condition()`` holds; 60 s at most."""
    for _ in range(6000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("condition never held")


# -- reward service ---------------------------------------------------------------------------


class HeldEmbedder:
    """A fake remote embedder whose calls wait until the test releases them."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.called = asyncio.Event()
        self.go = asyncio.Event()

    def embed(self, texts: Sequence[str]) -> FloatArray:
        raise AssertionError("the service awaits aembed")

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        self.calls.append(len(texts))
        self.called.set()
        await self.go.wait()
        return _unit_rows(texts)


def _steps(prefix: str, n: int) -> dict[str, str]:
    return {
        "response": "<think>" + "\n\n".join(f"{prefix} step {i}" for i in range(n)) + "</think>"
    }


def test_reward_request_past_the_deadline_is_503_and_counted() -> None:
    registry = CollectorRegistry()
    metrics = RewardMetrics.create(registry)
    settings = reward.RewardServiceSettings(deadline_s=1.0)
    # 10 texts/s, planned in full: a request of 6 step texts is 0.6 s of work.
    admission = Admission(1.0, RateEstimator(10.0), fair=False, unit="texts", headroom=1.0)
    model = reward.RewardModel(settings, metrics, admission=admission)

    async def main() -> tuple[httpx.Response, ...]:
        fake = HeldEmbedder()
        model.use_embedder(fake)
        async with _client(reward.build_router(model, metrics)) as client:
            url = "/v1/rewards/structure"
            first = asyncio.create_task(client.post(url, json={"requests": [_steps("a", 6)]}))
            await fake.called.wait()  # its 6 texts are being embedded
            refused = await client.post(url, json={"requests": [_steps("b", 6)]})  # 1.2 s
            labels = await client.post(url, json={"requests": [{"step_labels": [0, 1, 0]}]})
            small = asyncio.create_task(client.post(url, json={"requests": [_steps("c", 4)]}))
            await asyncio.sleep(0)
            fake.go.set()
            return await first, refused, labels, await small

    first, refused, labels, small = asyncio.run(main())
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    error = refused.json()["error"]
    assert error["type"] == "overloaded"
    assert "would finish in about 1.2 s" in error["message"]
    assert "deadline of 1 s" in error["message"] and "6 texts queued" in error["message"]
    assert labels.status_code == 200  # nothing to embed: no work to refuse
    assert first.status_code == small.status_code == 200  # 6 + 4 texts: exactly 1 s
    assert first.json()["results"][0]["num_steps"] == 6
    shed = _sample(registry, "sarl_reward_shed_total", reward="structure", reason="deadline")
    assert shed == 1
    assert admission.queued_work == 0  # every ticket released


def test_reward_queue_full_is_counted_as_shed() -> None:
    registry = CollectorRegistry()
    metrics = RewardMetrics.create(registry)
    settings = reward.RewardServiceSettings(max_concurrency=1, max_queue=0)
    model = reward.RewardModel(settings, metrics)

    async def main() -> tuple[httpx.Response, httpx.Response]:
        fake = HeldEmbedder()
        model.use_embedder(fake)
        async with _client(reward.build_router(model, metrics)) as client:
            url = "/v1/rewards/structure"
            first = asyncio.create_task(client.post(url, json={"requests": [_steps("a", 2)]}))
            await fake.called.wait()
            refused = await client.post(url, json={"requests": [{"step_labels": [0, 1]}]})
            fake.go.set()
            return await first, refused

    first, refused = asyncio.run(main())
    assert first.status_code == 200
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "overloaded"
    assert "--max-concurrency 1, --max-queue 0" in refused.json()["error"]["message"]
    shed = _sample(registry, "sarl_reward_shed_total", reward="structure", reason="queue_full")
    assert shed == 1
