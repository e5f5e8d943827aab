"""Benchmark: texts/s of ``sarl serve embedding`` against the same model in-process (the ceiling).

Run by ``make bench`` (through ``run_all.py``) or directly with
``.venv/bin/python tests/bench/bench_embedding_service.py``; not collected by pytest. Starts the
embedding service (bundled all-MiniLM-L6-v2 on CPU, service defaults) as a ``sarl serve``
subprocess, then embeds the same distinct reasoning-step texts (one to four phrases each, about
15 to 70 tokens) three ways, one after the other so they never share the cores:

* ``service_c1``: one client sending requests of 128 texts (the sdk client's batch size) one
  at a time;
* ``service_c16``: 16 clients each sending requests of 16 texts, so the service must coalesce
  concurrent requests into forward passes to keep up;
* ``service_c16_1_thread``: the same with ``--torch-threads 1`` (on a machine whose cores are
  shared with other busy processes, one intra-op thread can beat one per core);
* ``in_process``: the same model loaded in this process, the same torch thread settings as the
  service, every text in one ``encode`` call (sorted by length over all texts, in calls as large
  as the service's): no HTTP, no JSON, no scheduling — the ceiling the service is measured
  against.

A request the service sheds (503) is retried after its ``Retry-After`` and counted; nothing
here fails on a slow machine.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

import httpx
from bench_reward_service import _PHRASES  # same synthetic steps (tests/bench is on sys.path)

from sarl_services.testing import running_service

SERVICE_BATCH = 128  # --max-batch-size default of the service, and the sdk client's batch


def step_texts(count: int, seed: int) -> list[str]:
    """``count`` distinct step texts of one to four phrases (nothing de-duplicates away)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        phrases = [
            rng.choice(_PHRASES).format(a=i, b=rng.randint(2, 999), c=round(rng.random(), 4))
            for _ in range(rng.randint(1, 4))
        ]
        out.append(" ".join(phrases))
    return out


async def _serve_all(
    url: str, name: str, texts: list[str], concurrency: int, per_request: int
) -> dict[str, float]:
    """Embed ``texts`` in requests of ``per_request`` with ``concurrency`` clients."""
    chunks = iter([texts[i : i + per_request] for i in range(0, len(texts), per_request)])
    shed = 0

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal shed
        for chunk in chunks:  # the shared iterator hands each chunk to exactly one client
            while True:
                body = {"model": name, "input": chunk}
                response = await client.post(f"{url}/v1/embeddings", json=body)
                if response.status_code != 503:
                    break
                shed += 1
                await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
            if response.status_code != 200 or len(response.json()["data"]) != len(chunk):
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        seconds = time.perf_counter() - start
    return {"texts_per_s": len(texts) / seconds, "seconds": seconds, "shed": float(shed)}


def in_process(texts: list[str]) -> dict[str, float]:
    """The same model in this process, one ``encode`` call over every text (the ceiling)."""
    from sentence_transformers import SentenceTransformer

    from sarl.embedding.local import BUNDLED_MODEL, resolve_model_path
    from sarl_services.embedding import ROWS_PER_THREAD
    from sarl_services.threads import configure_threads

    threads = configure_threads(None)  # as the service does by default
    model = SentenceTransformer(str(resolve_model_path(BUNDLED_MODEL)), device="cpu")
    rows = ROWS_PER_THREAD * threads  # per forward call, as in the service
    model.encode(texts[:SERVICE_BATCH], batch_size=rows)  # one-off costs
    start = time.perf_counter()
    model.encode(texts, batch_size=rows, show_progress_bar=False)
    seconds = time.perf_counter() - start
    return {"texts_per_s": len(texts) / seconds, "seconds": seconds, "torch_threads": threads}


def run(texts_per_run: int = 512) -> dict[str, Any]:
    """Measure the service at two request patterns, then the in-process ceiling."""
    figures: dict[str, Any] = {"texts": texts_per_run}
    warm = step_texts(SERVICE_BATCH, seed=99)
    runs = {
        (): (("service_c1", 1, SERVICE_BATCH, 1), ("service_c16", 16, 16, 2)),
        ("--torch-threads", "1"): (("service_c16_1_thread", 16, 16, 4),),
    }
    for args, patterns in runs.items():
        with running_service("embedding", args) as service:
            asyncio.run(_serve_all(service.url, service.name, warm, 1, SERVICE_BATCH))
            for key, concurrency, per_request, seed in patterns:
                texts = step_texts(texts_per_run, seed)
                figures[key] = asyncio.run(
                    _serve_all(service.url, service.name, texts, concurrency, per_request)
                )
    figures["in_process"] = in_process(step_texts(texts_per_run, seed=3))
    ceiling = figures["in_process"]["texts_per_s"]
    for key in ("service_c1", "service_c16", "service_c16_1_thread"):
        figures[key]["ratio_to_in_process"] = figures[key]["texts_per_s"] / ceiling
    return figures


if __name__ == "__main__":
    json.dump(run(), sys.stdout, indent=2)
    print()
