"""Benchmark: throughput and latency of ``POST /v1/rewards/structure`` on the real service stack.

Run by ``make bench`` (through ``run_all.py``) or directly with
``.venv/bin/python tests/bench/bench_reward_service.py``; not collected by pytest. Starts the
embedding service (bundled all-MiniLM-L6-v2 on CPU) and a reward service that embeds through
it, both as ``sarl serve`` subprocesses on loopback ports, at the service defaults (reward:
``--deadline-s 10``, ``--max-concurrency 4``; embedding: ``--deadline-s 10``, dynamic
batching). Each request is a batch of 8 synthetic responses of ~20 steps, every step text
distinct, so nothing is served from de-duplication. The figures cover the whole path — HTTP,
JSON, step segmentation, the model's forward pass (which dominates on CPU), clustering.

Each concurrency level keeps that many clients sending, one request after another, for a ramp
of ``ramp_s`` and then a measured window of ``window_s``: throughput is the requests completed
inside the window per second (steady state, not the drain of a fixed burst). Each level runs
twice, in the order 1, 8, 32, 32, 8, 1, and its two windows are pooled, so a machine whose
speed drifts during the run (other processes on the same cores) favours no level. At the end
of a window the clients still waiting hang up (their work is dropped by the services) and the
next level starts once the reward service is idle.

A request the service sheds (503 ``overloaded``) does not fail the benchmark: it is counted,
and the client waits its ``Retry-After`` (plus up to 0.5 s of jitter) and sends it again, as a
trainer's client would. Per level: ``rps`` (accepted requests per second), ``p50_ms``/``p99_ms``
of the accepted attempts (what the deadline bounds), ``p99_with_retries_ms`` (first attempt to
answer), ``requests`` (completed in the windows) and ``shed`` (refusals in the windows).
``targets`` says, as measured in this one run (never asserted), whether throughput at
concurrency 32 is at least that at 1 and whether p99 at 32 is within the deadline. Any other
failure raises.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from sarl_services.reward import RewardServiceSettings
from sarl_services.testing import running_service

DEADLINE_S = RewardServiceSettings().deadline_s  # the service default the benchmark runs with


_PHRASES = (
    "Let me restate what the question asks about {a} and {b}.",
    "Compute {a} times {b}, which gives {c}.",
    "Wait, that does not look right; check {a} + {b} again.",
    "So far the reasoning is consistent with {c}.",
    "Now substitute {a} back into the equation for {b}.",
    "I should verify the bound with a concrete example such as {c}.",
    "Therefore the answer follows from step {a}.",
    "Let me simplify the expression {a}x + {b} first.",
)


def _responses(count: int, steps: int, counter: Iterator[int]) -> list[dict[str, str]]:
    """``count`` think-block responses of ``steps`` distinct steps each."""
    rng = random.Random(next(counter))
    out = []
    for _ in range(count):
        lines = [
            rng.choice(_PHRASES).format(a=next(counter), b=rng.randint(2, 999), c=rng.random())
            for _ in range(steps)
        ]
        out.append({"response": "<think>" + "\n\n".join(lines) + "</think> done"})
    return out


@dataclass
class _Tally:
    """What the clients of one level saw inside the measured windows."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # accepted attempts
    with_retries: list[float] = field(default_factory=list)  # first attempt to answer
    shed: int = 0


async def _window(
    url: str,
    concurrency: int,
    ramp_s: float,
    window_s: float,
    make_body: Callable[[], dict[str, Any]],
    tally: _Tally,
) -> None:
    """``concurrency`` clients sending back to back; counts what lands inside the window."""
    loop = asyncio.get_running_loop()
    measure_from = loop.time() + ramp_s
    end = measure_from + window_s

    def in_window(t: float) -> bool:
        return measure_from <= t <= end

    async def client_loop(client: httpx.AsyncClient, jitter: random.Random) -> None:
        while True:
            body = make_body()
            first = loop.time()
            while True:
                sent = loop.time()
                response = await client.post(f"{url}/v1/rewards/structure", json=body)
                if response.status_code != 503:
                    break
                tally.shed += in_window(loop.time())
                wait = float(response.headers.get("Retry-After", "1"))
                await asyncio.sleep(wait + 0.5 * jitter.random())
            now = loop.time()
            results = response.json().get("results") if response.is_success else None
            if not results or any("error" in r for r in results):
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
            if in_window(now):
                tally.latencies.append(now - sent)
                tally.with_retries.append(now - first)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        tasks = [
            asyncio.create_task(client_loop(client, random.Random(i))) for i in range(concurrency)
        ]
        done, _ = await asyncio.wait(
            tasks, timeout=end - loop.time(), return_when=asyncio.FIRST_EXCEPTION
        )
        for task in tasks:  # the clients still waiting hang up
            task.cancel()
        await asyncio.wait(tasks)
        for task in done:
            task.result()  # a failure other than 503 raises here
    tally.seconds += window_s


def _settle(url: str, timeout_s: float = 60.0) -> None:
    """Wait until the reward service scores and queues nothing (hang-ups take a moment)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = [
            float(line.split()[-1])
            for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines()
            if line.startswith(("sarl_reward_in_flight ", "sarl_reward_queued "))
        ]
        if not any(busy):
            return
        time.sleep(0.2)


def _figures(tally: _Tally, batch: int) -> dict[str, float]:
    done = len(tally.latencies)
    ms = np.asarray(tally.latencies or [np.nan]) * 1000.0
    retries_ms = np.asarray(tally.with_retries or [np.nan]) * 1000.0
    return {
        "rps": done / tally.seconds,
        "responses_per_s": done * batch / tally.seconds,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "p99_with_retries_ms": float(np.percentile(retries_ms, 99)),
        "requests": float(done),
        "shed": float(tally.shed),
    }


def run(
    levels: tuple[int, ...] = (1, 8, 32),
    ramp_s: float = 4.0,
    window_s: float = 16.0,
    batch: int = 8,
    steps: int = 20,
    embedding_args: tuple[str, ...] = (),
    reward_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Measure each level (two windows of ``window_s``, see the module docstring);
    ``{"c1": {"rps", "p50_ms", "p99_ms", "shed", ...}, ..., "targets": {...}}``."""
    counter = itertools.count()

    def make_body() -> dict[str, Any]:
        return {"requests": _responses(batch, steps, counter)}

    tallies = {c: _Tally() for c in levels}
    with running_service("embedding", embedding_args) as embedding:
        args = ["--embedder", "openai", "--embedding-url", embedding.url]
        args += ["--embedding-model", embedding.name, *reward_args]
        with running_service("reward", args) as reward:
            httpx.post(f"{reward.url}/v1/rewards/structure", json=make_body(), timeout=300)
            for c in (*levels, *reversed(levels)):  # warm-up above; then 1, 8, 32, 32, 8, 1
                asyncio.run(_window(reward.url, c, ramp_s, window_s, make_body, tallies[c]))
                _settle(reward.url)
    figures: dict[str, Any] = {f"c{c}": _figures(tallies[c], batch) for c in levels}
    figures["batch"] = batch
    figures["steps_per_response"] = steps
    figures["deadline_s"] = DEADLINE_S
    figures["window_s"] = 2 * window_s
    low, high = f"c{min(levels)}", f"c{max(levels)}"
    figures["targets"] = {
        f"rps_{high}_at_least_{low}": figures[high]["rps"] >= figures[low]["rps"],
        f"p99_{high}_within_deadline": figures[high]["p99_ms"] <= DEADLINE_S * 1000.0,
    }
    return figures


if __name__ == "__main__":
    json.dump(run(), sys.stdout, indent=2)
    print()
