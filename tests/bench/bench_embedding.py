"""Benchmark: step embedding over HTTP, batched client vs naive per-response requests, in one run.

Run by ``make bench`` (through ``run_all.py``) or directly with
``PYTHONPATH=sdk/src python tests/bench/bench_embedding.py``; not collected by pytest. Both paths
talk to the same local OpenAI-compatible server (:mod:`tests.support.embedding_server`), so the
numbers measure request overhead and duplicated work, not a model:

* naive reference: one request per response, sequentially, every step sent as it is, vectors as
  JSON numbers (``encoding_format: "float"``, the OpenAI default), a plain ``httpx.Client`` with
  keep-alive, so it is not penalised for connection setup;
* naive reference over base64: the same, but asking for base64 vectors and decoding them with
  ``numpy.frombuffer``, so the table can tell what the wire format buys from what batching,
  de-duplication and concurrency buy (``speedup_vs_naive_base64``);
* production path: :class:`sarl.embedding.openai_client.OpenAIEmbeddingClient` with its default
  settings (base64), given every step of every response at once (de-duplicated, batched,
  concurrent).

The synthetic traces repeat stock phrases across responses ("Let me double-check ...") as real
reasoning traces do, so de-duplication has something to find. All paths must return exactly the
same vectors; the benchmark raises if they do not. Each path is timed ``repeats`` times on the
same server and its median kept, so one scheduling hiccup on a shared machine does not decide
the ratio.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt

import sarl
from sarl.embedding.base import normalize_rows
from sarl.embedding.openai_client import OpenAIEmbeddingClient

MODEL = "bench-embedding"
_STOCK_STEPS = (
    "Let me double-check the arithmetic.",
    "Wait, that does not look right.",
    "So far the reasoning is consistent.",
    "Let me restate what the question asks.",
    "Therefore the answer follows.",
    "I should verify this with a concrete example.",
    "Let me simplify the expression first.",
    "Now substitute the value back in.",
)


def synthetic_steps(
    num_responses: int, steps_per_response: int, *, repeat_share: float = 0.3, seed: int = 0
) -> list[list[str]]:
    """Steps of ``num_responses`` traces; about ``repeat_share`` of them are shared phrases."""
    rng = np.random.default_rng(seed)
    stock = [f"{phrase} (variant {k})" for phrase in _STOCK_STEPS for k in range(8)]  # 64 phrases
    responses = []
    for r in range(num_responses):
        steps = []
        for s in range(steps_per_response):
            if rng.random() < repeat_share:
                steps.append(stock[int(rng.integers(len(stock)))])
            else:
                a, b, c = (int(x) for x in rng.integers(2, 999, size=3))
                steps.append(
                    f"Step {s + 1}: multiply {a} by {b} to get {a * b}, then subtract {c} "
                    f"to get {a * b - c} (trace {r})."
                )
        responses.append(steps)
    return responses


def naive_embed(base_url: str, responses: list[list[str]]) -> list[npt.NDArray[np.float32]]:
    """The reference: one request per response, in order, no de-duplication, JSON numbers."""
    out = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for steps in responses:
            reply = client.post(
                "/v1/embeddings", json={"model": MODEL, "input": steps, "encoding_format": "float"}
            )
            reply.raise_for_status()
            data = sorted(reply.json()["data"], key=lambda item: item["index"])
            out.append(normalize_rows([item["embedding"] for item in data]))  # (steps, dim)
    return out


def naive_base64_embed(base_url: str, responses: list[list[str]]) -> list[npt.NDArray[np.float32]]:
    """:func:`naive_embed` asking for base64 vectors (little-endian float32) instead."""
    out = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for steps in responses:
            reply = client.post(
                "/v1/embeddings", json={"model": MODEL, "input": steps, "encoding_format": "base64"}
            )
            reply.raise_for_status()
            data = sorted(reply.json()["data"], key=lambda item: item["index"])
            rows = [np.frombuffer(base64.b64decode(item["embedding"]), "<f4") for item in data]
            out.append(normalize_rows(np.stack(rows)))  # (steps, dim)
    return out


def _median_time(
    embed: Callable[[], npt.NDArray[np.float32]], repeats: int
) -> tuple[float, npt.NDArray[np.float32]]:
    """Median wall time of ``repeats`` calls, and the last call's vectors."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        vectors = embed()
        times.append(time.perf_counter() - start)
    return statistics.median(times), vectors


@contextlib.contextmanager
def _server_process(dim: int) -> Iterator[str]:
    """Run the local embedding server in its own process, like a real model server; yield its URL.

    In-process, the server's JSON encoding would compete with the client for the GIL and hide
    the overlap that concurrent requests buy against a real, separate server.
    """
    src = str(Path(sarl.__file__).resolve().parents[1])
    root = str(Path(__file__).resolve().parents[2])  # the server is tests.support.embedding_server
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([root, src, os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "tests.support.embedding_server", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--dim", str(dim)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = proc.stdout.readline() if proc.stdout is not None else ""
        match = re.search(r"(http://\S+)/v1/embeddings", line)
        if match is None:
            raise RuntimeError(f"embedding server did not start (printed {line!r})")
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def run(
    num_responses: int = 256, steps_per_response: int = 40, repeats: int = 3
) -> dict[str, float]:
    """Time the three paths on the same synthetic batch; return timings, speedups and counts.

    Counts (``requests_*``, ``texts_*``: strings sent after de-duplication) are whole numbers,
    per timed run; ``same_vectors`` is True (the run raises otherwise).
    """
    responses = synthetic_steps(num_responses, steps_per_response)
    flat = [step for steps in responses for step in steps]
    with _server_process(dim=384) as url:
        client = OpenAIEmbeddingClient(base_url=url, model=MODEL)
        # Warm every path (imports, TLS defaults, first connections) outside the timed region.
        client.embed(["warm-up"])
        naive_embed(url, [["warm-up"]])
        naive_base64_embed(url, [["warm-up"]])
        warm = client.stats()

        naive_s, naive = _median_time(lambda: np.concatenate(naive_embed(url, responses)), repeats)
        naive_base64_s, naive_base64 = _median_time(
            lambda: np.concatenate(naive_base64_embed(url, responses)), repeats
        )
        batched_s, batched = _median_time(lambda: client.embed(flat), repeats)  # (steps, dim)
        stats = client.stats()

    # Exactly equal: base64 carries the very float32 values the JSON numbers spell out.
    if not (np.array_equal(batched, naive) and np.array_equal(naive_base64, naive)):
        raise RuntimeError("batched and naive embeddings differ; the benchmark is invalid")
    return {
        "batched_s": batched_s,
        "naive_s": naive_s,
        "naive_base64_s": naive_base64_s,
        "embedding_speedup": naive_s / batched_s,
        "speedup_vs_naive_base64": naive_base64_s / batched_s,
        "requests_batched": (stats.requests - warm.requests) / repeats,
        "requests_naive": len(responses),
        "texts_batched": (stats.texts_sent - warm.texts_sent) / repeats,
        "texts_naive": len(flat),
        "same_vectors": True,
    }


def _print_table(results: dict[str, float]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is an sdk dependency, but a bare checkout may lack it
        for key, value in results.items():
            print(f"{key:>20}  {value:.3f}")
        return
    table = Table(title="Step embedding: batched client vs naive per-response requests")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in results.items():
        if isinstance(value, bool):
            text = str(value)
        elif key.startswith(("requests", "texts")):
            text = f"{value:.0f}"
        else:
            text = f"{value:.3f}"
        table.add_row(key, text)
    Console().print(table)


if __name__ == "__main__":
    _print_table(run())
