"""Scoring responses with the SARL structure reward: steps -> embeddings -> clusters -> map -> SR.

Public entry points, called by the CLI, the adapters (TRL, verl) and later the reward service:

* :func:`score_labels` — per-step cluster labels given (no embedding, no clustering);
* :func:`score_embeddings` — per-step embeddings given (clustering + map + score);
* :class:`StructureScorer` — text in; the batch path embeds the steps of *all* responses in one
  embedder call (the embedder batches and de-duplicates requests) and clusters responses in
  parallel worker processes, which die with the process that started them
  (:mod:`sarl.parent_death`). Step texts reach the embedder with lone surrogates replaced
  (``sarl.rewards.text``): text embedders encode steps as UTF-8.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from itertools import pairwise
from multiprocessing import get_context
from typing import Any

import numpy as np
import numpy.typing as npt

from sarl.embedding.base import Embedder, EmbeddingError
from sarl.parent_death import ParentBoundProcessPool
from sarl.rewards.structure.clustering import cluster_steps, kmeans_bucket
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.graph import (
    average_path_length,
    build_map,
    build_maps,
    clustering_coefficient,
    map_statistics,
)
from sarl.rewards.structure.result import StructureResult
from sarl.rewards.structure.score import structure_reward
from sarl.rewards.structure.segmentation import Steps, extract_steps
from sarl.rewards.text import encodable

# Below this many responses a process pool costs more (start-up, pickling) than it saves.
_MIN_PARALLEL_BATCH = 64


def score_labels(
    labels: Sequence[int],
    config: StructureRewardConfig | None = None,
    *,
    truncated: bool = False,
) -> StructureResult:
    """Score a response whose steps already carry cluster labels (one int >= 0 per step)."""
    cfg = config or StructureRewardConfig()
    graph = build_map(labels)
    neighbors = graph.neighbors()
    c = clustering_coefficient(neighbors)
    path = average_path_length(neighbors)
    score = structure_reward(
        c,
        path,
        num_nodes=graph.num_nodes,
        variant=cfg.variant,
        degenerate_score=cfg.degenerate_score,
    )
    return StructureResult(
        score=score,
        clustering=c,
        path_length=path,
        num_steps=len(graph.walk),
        labels=graph.walk,
        graph=graph,
        truncated=truncated,
    )


def score_embeddings(
    embeddings: npt.ArrayLike,
    config: StructureRewardConfig | None = None,
    *,
    truncated: bool = False,
) -> StructureResult:
    """Score a response from its step embeddings, shape (steps, dim); rows are unit-normalised
    inside clustering, so raw model outputs are fine. Zero or non-finite rows raise ValueError."""
    cfg = config or StructureRewardConfig()
    arr = np.asarray(embeddings)
    if arr.ndim == 2 and arr.shape[0] == 0:
        return score_labels([], cfg, truncated=truncated)
    return score_labels(cluster_steps(arr, cfg).tolist(), cfg, truncated=truncated)


def score_embeddings_batch(
    embeddings: Sequence[npt.ArrayLike],
    config: StructureRewardConfig | None = None,
    *,
    truncated: Sequence[bool] | None = None,
) -> list[StructureResult]:
    """Score many responses from their step embeddings, in input order.

    KMeans runs vectorised over all responses with the same step count (one bucket = one set of
    stacked numpy calls), which removes the per-call overhead that dominates at ~60 steps, and so
    do their maps and statistics (:func:`score_walks`). Results equal those of
    :func:`score_embeddings` for each response alone.
    """
    cfg = config or StructureRewardConfig()
    arrays = [np.asarray(e) for e in embeddings]
    flags = list(truncated) if truncated is not None else [False] * len(arrays)
    if cfg.clustering != "kmeans":
        return [
            score_labels(cluster_steps(a, cfg).tolist() if a.shape[0] else [], cfg, truncated=t)
            for a, t in zip(arrays, flags, strict=True)
        ]
    results: list[StructureResult | None] = [None] * len(arrays)
    for idx, stack in _buckets(arrays):
        walks = kmeans_bucket(stack, cfg)  # canonical: each row is its map's walk
        scored = score_walks(walks, cfg, truncated=[flags[i] for i in idx])
        for i, result in zip(idx, scored, strict=True):
            results[i] = result
    return [
        r if r is not None else score_labels([], cfg, truncated=t)
        for r, t in zip(results, flags, strict=True)
    ]


def score_walks(
    walks: npt.NDArray[np.int64],
    config: StructureRewardConfig,
    *,
    truncated: Sequence[bool],
) -> list[StructureResult]:
    """:func:`score_labels` of each row of (B, M) canonical labels (M >= 1), vectorised over
    the rows: equal results, bit for bit (the equality is tested)."""
    graphs = build_maps(walks)
    clustering, path = map_statistics(walks)
    out = []
    for graph, c, p, t in zip(graphs, clustering.tolist(), path.tolist(), truncated, strict=True):
        length = None if math.isnan(p) else p
        score = structure_reward(
            c,
            length,
            num_nodes=graph.num_nodes,
            variant=config.variant,
            degenerate_score=config.degenerate_score,
        )
        out.append(
            StructureResult(
                score=score,
                clustering=c,
                path_length=length,
                num_steps=len(graph.walk),
                labels=graph.walk,
                graph=graph,
                truncated=t,
            )
        )
    return out


def _buckets(
    arrays: list[npt.NDArray[Any]],
) -> Iterator[tuple[list[int], list[npt.NDArray[np.floating]]]]:
    """Group non-empty (steps, dim) float arrays by shape (one KMeans bucket per shape)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, a in enumerate(arrays):
        if a.ndim != 2:
            raise ValueError(f"step_embeddings: expected shape (steps, dim), got {a.shape}")
        if a.shape[0]:
            groups.setdefault(a.shape, []).append(i)
    for idx in groups.values():
        yield idx, [_as_float(arrays[i]) for i in idx]


def _as_float(a: npt.NDArray[Any]) -> npt.NDArray[np.floating]:
    return a if a.dtype in (np.float32, np.float64) else a.astype(np.float64)


def _score_chunk(
    chunk: list[tuple[npt.NDArray[np.floating], bool]], config: StructureRewardConfig
) -> list[StructureResult]:
    return score_embeddings_batch([e for e, _ in chunk], config, truncated=[t for _, t in chunk])


def _limit_worker_threads() -> None:
    # One BLAS thread per worker process: the pool already uses every core.
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


class StructureScorer:
    """Scores raw responses with an embedder; reusable across batches (holds a worker pool).

    ``workers``: processes used to cluster large batches (default: all cores; 1 = in-process).
    Call :meth:`close` (or use as a context manager) to stop the pool.
    """

    def __init__(
        self,
        config: StructureRewardConfig | None = None,
        embedder: Embedder | None = None,
        *,
        workers: int | None = None,
    ) -> None:
        self.config = config or StructureRewardConfig()
        self.embedder = embedder
        if workers is not None and workers < 1:
            raise ValueError(f"workers: must be >= 1, got {workers}")
        self.workers = workers or os.cpu_count() or 1
        self._pool: Executor | None = None

    def __enter__(self) -> StructureScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def steps(self, response: str) -> Steps:
        return extract_steps(response, self.config)

    def score(self, response: str) -> StructureResult:
        """Score one response (embeds its steps in one embedder call)."""
        return self.score_batch([response])[0]

    def score_batch(self, responses: Sequence[str]) -> list[StructureResult]:
        """Score many responses: one embedder call for all their steps, parallel clustering."""
        steps = [self.steps(r) for r in responses]
        flat = [encodable(t) for s in steps for t in s.texts]  # UTF-8 safe: see sarl.rewards.text
        vectors = self._require_embedder().embed(flat) if flat else np.zeros((0, 0), np.float32)
        return self.score_embedded(steps, vectors)

    async def ascore_batch(self, responses: Sequence[str]) -> list[StructureResult]:
        """Async twin of :meth:`score_batch` for async trainers (verl's reward loop).

        Uses the embedder's ``aembed`` when it has one; clustering runs off the event loop.
        """
        steps = [self.steps(r) for r in responses]
        flat = [encodable(t) for s in steps for t in s.texts]  # UTF-8 safe: see sarl.rewards.text
        embedder = self._require_embedder()
        if not flat:
            vectors = np.zeros((0, 0), np.float32)
        elif hasattr(embedder, "aembed"):
            vectors = await embedder.aembed(flat)
        else:
            vectors = await asyncio.to_thread(embedder.embed, flat)
        return await asyncio.to_thread(self.score_embedded, steps, vectors)

    def score_embedded(
        self, steps: Sequence[Steps], vectors: npt.NDArray[np.float32]
    ) -> list[StructureResult]:
        """Cluster and score responses given the embeddings of all their steps, concatenated."""
        total = sum(len(s.texts) for s in steps)
        if vectors.shape[0] != total:
            raise EmbeddingError(f"embedder returned {vectors.shape[0]} vectors for {total} steps")
        chunks = _split(vectors, [len(s.texts) for s in steps])
        return self.score_embeddings_batch(chunks, [s.truncated for s in steps])

    def score_embeddings_batch(
        self, embeddings: Sequence[npt.NDArray[np.floating]], truncated: Sequence[bool]
    ) -> list[StructureResult]:
        """:func:`score_embeddings_batch` with this scorer's config, in input order, in the worker
        pool when the batch is large (the clustering of :meth:`score_batch`; also that of
        ``sarl reward score structure``'s lines). Results equal the in-process ones: a
        response's result never depends on its batch."""
        items = list(zip(embeddings, truncated, strict=True))
        if self.workers == 1 or len(items) < _MIN_PARALLEL_BATCH:
            return _score_chunk(items, self.config)
        return self._parallel(items)

    def _parallel(
        self, items: list[tuple[npt.NDArray[np.floating], bool]]
    ) -> list[StructureResult]:
        if self._pool is None:
            # "spawn": forking a process that holds torch/CUDA or BLAS thread pools is unsafe.
            # Parent-bound: a SIGKILLed trainer must not leave its workers adopted by init.
            self._pool = ParentBoundProcessPool(
                max_workers=self.workers,
                mp_context=get_context("spawn"),
                initializer=_limit_worker_threads,
            )
        size = max(1, -(-len(items) // (self.workers * 4)))
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        futures = [self._pool.submit(_score_chunk, c, self.config) for c in chunks]
        return [r for f in futures for r in f.result()]

    def _require_embedder(self) -> Embedder:
        if self.embedder is None:
            raise ValueError(
                "embedder: none configured; pass one to StructureScorer or supply "
                "step_labels/step_embeddings"
            )
        return self.embedder


def _split(vectors: npt.NDArray[np.float32], sizes: list[int]) -> list[Any]:
    """Cut the concatenated (total, dim) vectors back into per-response (steps, dim) blocks."""
    bounds = np.cumsum([0, *sizes])
    return [vectors[a:b] for a, b in pairwise(bounds.tolist())]
