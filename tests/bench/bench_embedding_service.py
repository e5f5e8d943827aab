"""Benchmark: ``sarl serve embedding`` against Infinity, the embedding server researchers reach for.

Run by ``make bench`` (through ``run_all.py``) or directly with
``.venv/bin/python tests/bench/bench_embedding_service.py``; not collected by pytest. Same
machine, same cores, same distinct reasoning-step texts (one to four phrases, about 15 to 70
tokens), same all-MiniLM-L6-v2 weights (the bundled copy), fp32. Servers, started once and idle
while another is measured:

* ``sarl``: the service with its defaults (ONNX Runtime backend, :mod:`sarl.embedding.encoders`);
* ``sarl_torch``: the same with ``--backend torch`` (what the service ran before issue 26);
* ``infinity_torch`` and ``infinity_onnx``: Infinity (``infinity_emb v2``, ``--engine torch`` /
  ``--engine optimum``, its defaults otherwise) from its own environment, ``.venv-peer``
  (``make setup-peer``); skipped when that is absent. Infinity's ONNX engine is handed the ONNX
  file ``sarl`` runs, in a copy of the bundled model under ``--out`` (see ``_peer_model``).

Workloads (issue 26): ``c1`` one client sending requests of 128 texts one after another; ``c16``
16 clients each sending requests of 16; ``c64`` 64 clients each sending one text per request.
Each round runs every server on every workload (texts drawn afresh per round, so no server sees
a text twice); a server's figure is its best round (as for the structure reward), with p50/p99
request latency of that round. A request the service sheds (503) is retried after its
``Retry-After`` and counted; its latency counts from the first try (a connection closed under a
request is retried and counted too). The vectors of every server
are compared on the same texts (smallest cosine to ``sarl``'s). In-process ceilings: the ONNX
and torch encoders over all texts in one call.

Benchmarks are measurements, never tests: nothing here fails on a slow machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from bench_reward_service import _PHRASES  # same synthetic steps (tests/bench is on sys.path)

from sarl_services.testing import free_port, running_service

ROOT = Path(__file__).resolve().parents[2]
PEER_PYTHON = ROOT / ".venv-peer" / "bin" / "python"
#: (key, clients, texts per request)
WORKLOADS = (("c1", 1, 128), ("c16", 16, 16), ("c64", 64, 1))


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


@dataclass(frozen=True)
class Server:
    """A running embedding server: where to POST and the model name to send."""

    key: str
    url: str  # the embeddings route
    model: str


class _Connection:
    """A bare HTTP/1.1 keep-alive connection: POST JSON, read one Content-Length response.

    The load generator runs on the same cores as the server it measures; httpx with 64
    concurrent connections took 0.8 of a core of the 2 here (its connection pool), leaving the
    server one. This costs a few tens of microseconds per request, the same for every server."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port, self.path = host, port, path
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, payload: bytes) -> tuple[int, dict[str, str], bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        try:
            self._writer.write(head.encode() + payload)
            lines = (await self._reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            if "content-length" not in headers:
                raise RuntimeError(f"no Content-Length in the response: {headers}")
            body = await self._reader.readexactly(int(headers["content-length"]))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def _serve_all(
    server: Server, texts: list[str], concurrency: int, per_request: int
) -> dict[str, float]:
    """Embed ``texts`` in requests of ``per_request`` with ``concurrency`` clients."""
    chunks = iter([texts[i : i + per_request] for i in range(0, len(texts), per_request)])
    shed = dropped = 0
    latencies: list[float] = []
    url = httpx.URL(server.url)

    async def client_loop() -> None:
        nonlocal shed, dropped
        connection = _Connection(url.host, url.port or 80, url.raw_path.decode())
        for chunk in chunks:  # the shared iterator hands each chunk to exactly one client
            sent = time.perf_counter()
            payload = orjson.dumps({"model": server.model, "input": chunk})
            while True:
                try:
                    status, headers, body = await connection.post(payload)
                except (OSError, asyncio.IncompleteReadError):  # a connection the server closed
                    dropped += 1
                    if dropped > 10:
                        raise
                    continue
                if status != 503:
                    break
                shed += 1
                await asyncio.sleep(float(headers.get("retry-after", "1")))
            if status != 200 or len(orjson.loads(body)["data"]) != len(chunk):
                raise RuntimeError(f"{server.key}: HTTP {status}: {body[:300]!r}")
            latencies.append(time.perf_counter() - sent)
        connection.close()

    start = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    seconds = time.perf_counter() - start
    return {
        "texts_per_s": len(texts) / seconds,
        "seconds": seconds,
        "p50_s": float(np.percentile(latencies, 50)),
        "p99_s": float(np.percentile(latencies, 99)),
        "shed": float(shed),
        "dropped_connections": float(dropped),
    }


def _vectors(server: Server, texts: list[str]) -> np.ndarray:
    response = httpx.post(server.url, json={"model": server.model, "input": texts}, timeout=600)
    response.raise_for_status()
    rows = sorted(response.json()["data"], key=lambda d: d["index"])
    return np.asarray([d["embedding"] for d in rows], dtype=np.float64)


@contextmanager
def _sarl(key: str, args: tuple[str, ...]) -> Iterator[Server]:
    with running_service("embedding", args, timeout_s=600) as service:
        yield Server(key, f"{service.url}/v1/embeddings", service.name)


def _peer_model(out: Path) -> Path:
    """A copy of the bundled model with the ONNX file Infinity's optimum engine loads: the same
    checked file ``sarl`` runs (:mod:`sarl.embedding.onnx_export`), so both servers run the same
    graph and differ only in serving. (The model has no ONNX file of its own; Infinity 0.0.78's
    graph optimisation does not run with optimum 2, whose ``OptimizationConfig`` lost an argument
    it passes, and optimum 1.x does not import with torch 2.13.)"""
    from sentence_transformers import SentenceTransformer

    from sarl.embedding.local import BUNDLED_MODEL, resolve_model_path
    from sarl.embedding.onnx_export import exported_onnx

    source = resolve_model_path(BUNDLED_MODEL)
    model = out / "peer-model"
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(source, model)
    onnx = exported_onnx(SentenceTransformer(str(source), device="cpu"), source)
    # Infinity matches the file by name from the model directory's root.
    shutil.copyfile(onnx, model / "model.onnx")
    return model


def _offline() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.update(INFINITY_ANONYMOUS_USAGE_STATS="0", DO_NOT_TRACK="1")
    return env


@contextmanager
def _infinity(key: str, engine: str, model: Path, out: Path) -> Iterator[Server]:
    port = free_port()
    log = (out / f"{key}.log").open("wb")
    env = _offline()
    env["HF_HOME"] = str(out / "peer-hf")  # Infinity's optimized ONNX files go here
    # Run from the model directory with --model-id "." : Infinity 0.0.78 lists the directory's
    # files relative to the id and hands optimum the ONNX file's name.
    launch = "import sys; from infinity_emb.cli import cli; sys.argv[0] = 'infinity_emb'; cli()"
    command = [str(PEER_PYTHON), "-c", launch, "v2", "--model-id", "."]
    command += ["--served-model-name", "peer", "--engine", engine, "--device", "cpu"]
    # Its optimisation fails with optimum 2 anyway (see _peer_model); ONNX Runtime's fused
    # attention was slower on CPU than this graph (sarl.embedding.onnx_export).
    command += ["--onnx-disable-optimize"]
    # The model's own pooling: Infinity's "auto" is CLS pooling on its ONNX engine (different
    # vectors: cosine ~0.2 to the model's).
    command += ["--pooling-method", "mean"]
    command += ["--port", str(port), "--host", "127.0.0.1"]
    process = subprocess.Popen(command, cwd=model, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{key} exited {process.returncode}; see {log.name}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/models", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{key} not ready after 600 s; see {log.name}")
            time.sleep(1)
        yield Server(key, f"http://127.0.0.1:{port}/embeddings", "peer")
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def in_process(texts: list[str]) -> dict[str, Any]:
    """The encoders in this process, every text in one call (the ceilings)."""
    from sarl.embedding.loading import load_encoder
    from sarl.embedding.local import BUNDLED_MODEL, resolve_model_path
    from sarl_services.threads import configure_threads

    threads = configure_threads(None)  # as the service does by default
    figures: dict[str, Any] = {"threads": threads}
    for backend in ("onnx", "torch"):
        encoder = load_encoder(resolve_model_path(BUNDLED_MODEL), backend=backend, threads=threads)
        encoder.encode(texts[:128])  # one-off costs
        start = time.perf_counter()
        encoder.encode(texts)
        figures[backend] = len(texts) / (time.perf_counter() - start)
    return figures


def run(texts_per_run: int = 512, rounds: int = 2, out: Path = Path("out/bench")) -> dict[str, Any]:
    """Every server on every workload, ``rounds`` times; then the in-process ceilings."""
    out.mkdir(parents=True, exist_ok=True)
    peer = PEER_PYTHON.is_file()
    figures: dict[str, Any] = {"texts": texts_per_run, "rounds": rounds, "peer_installed": peer}
    with ExitStack() as stack:
        servers = [
            stack.enter_context(_sarl("sarl", ())),
            stack.enter_context(_sarl("sarl_torch", ("--backend", "torch"))),
        ]
        if peer:
            model = _peer_model(out)
            for key, engine in (("infinity_torch", "torch"), ("infinity_onnx", "optimum")):
                servers.append(stack.enter_context(_infinity(key, engine, model, out)))
        check = step_texts(64, seed=7)
        reference = _vectors(servers[0], check)
        for server in servers:
            asyncio.run(_serve_all(server, step_texts(128, seed=99), 1, 128))  # warm-up
            cosine = np.sum(reference * _vectors(server, check), axis=1)
            figures[server.key] = {"min_cosine_to_sarl": float(cosine.min())}
        for r in range(rounds):
            for w, (workload, clients, per_request) in enumerate(WORKLOADS):
                texts = step_texts(texts_per_run, seed=1000 * r + w)
                for server in servers:
                    row = asyncio.run(_serve_all(server, texts, clients, per_request))
                    best = figures[server.key].get(workload)
                    if best is None or row["texts_per_s"] > best["texts_per_s"]:
                        figures[server.key][workload] = row
    figures["in_process"] = in_process(step_texts(texts_per_run, seed=3))
    peers = [k for k in ("infinity_torch", "infinity_onnx") if k in figures]
    for workload, _, _ in WORKLOADS:
        ours = figures["sarl"][workload]["texts_per_s"]
        figures["sarl"][workload]["vs_torch_backend"] = (
            ours / figures["sarl_torch"][workload]["texts_per_s"]
        )
        if peers:
            best = max(peers, key=lambda k: figures[k][workload]["texts_per_s"])
            figures["sarl"][workload]["best_peer"] = best
            figures["sarl"][workload]["vs_best_peer"] = (
                ours / figures[best][workload]["texts_per_s"]
            )
    return figures


if __name__ == "__main__":
    json.dump(run(), sys.stdout, indent=2)
    print()
