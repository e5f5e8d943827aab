"""Score JSON Lines with the structure reward's own contract: the engine of
``sarl reward score structure`` (and of its hidden old name ``sarl reward structure``).

Input: one JSON object per line (see ``sarl.rewards.structure.requests`` for the fields):
``response``, and ``step_labels`` or ``step_embeddings`` that may replace it. The line contract
and exit codes are :mod:`sarl.cli.lines`'s. A line's problem is that line's error and never
changes another line's result: anything a line can hold (JSON nested past the recursion limit,
integers past Python's digit limit or float64's range, embeddings of any finite magnitude) is
validated or scored on its own. The one shared failure is the embedder's (a service down): every
text line of the chunk being embedded reports it; lines with labels or embeddings are unaffected.

Each line becomes a :class:`StructureLine`: its output object (made by the caller's ``row_of``
from the :class:`~sarl.rewards.structure.result.StructureResult`, or the line's error object)
and the result itself, from which ``--out`` draws reasoning maps without scoring again.

A chunk's embeddings are clustered by the caller's ``cluster`` when given: ``sarl reward score
structure`` passes its reward's scorer (:meth:`StructureScorer.score_embeddings_batch`), so the
reward's ``workers`` setting runs them in the scorer's worker pool as in the reward service and
the trainers; without it (the old name), in this process. The results are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import typer

from sarl.cli import lines
from sarl.embedding.base import Embedder
from sarl.rewards.samples import SampleError, json_type
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.requests import (
    ScoreRequest,
    ScoringFailure,
    embed_requests,
    parse_request,
    score_isolated,
)
from sarl.rewards.structure.result import StructureResult

RowOf = Callable[[StructureResult], dict[str, Any]]
#: Scores step embeddings (one (steps, dim) array per response) with their truncation flags,
#: in order: :meth:`sarl.rewards.structure.scorer.StructureScorer.score_embeddings_batch`.
Cluster = Callable[[Sequence[npt.NDArray[np.floating]], Sequence[bool]], list[StructureResult]]


@dataclass(frozen=True, slots=True)
class StructureLine:
    """The output object of one input line; its result and ``id`` field when it was scored."""

    number: int
    row: dict[str, Any]
    result: StructureResult | None = None
    id: str | None = None


class LazyEmbedder:
    """Builds the embedder only when some line needs text embedded (labels-only input needs no
    model); a failure to build it is the error of the text lines that needed it."""

    def __init__(self, build: Callable[[], Embedder]) -> None:
        self._build = build
        self._value: Embedder | None = None

    def get(self) -> Embedder:
        if self._value is None:
            self._value = self._build()
        return self._value


def score_lines(
    stream: IO[bytes],
    config: StructureRewardConfig,
    embedder: LazyEmbedder,
    row_of: RowOf,
    *,
    chunk_lines: int = lines.CHUNK_LINES,
    cluster: Cluster | None = None,
) -> Iterator[list[StructureLine]]:
    """Batches of line results (one per input line, in input order when concatenated), one
    batch per chunk of ``chunk_lines`` lines; embeddings clustered by ``cluster`` when given
    (else in this process). Exceptions other than a line's own are bugs."""
    for chunk in lines.chunks(lines.numbered_lines(stream), chunk_lines):
        yield score_chunk(chunk, config, embedder, row_of, cluster=cluster)


def _parse(raw: bytes, config: StructureRewardConfig) -> tuple[ScoreRequest, str | None]:
    """Decode, parse and validate one input line (and its ``id``, for map titles)."""
    obj = lines.decode_json(raw)
    if not isinstance(obj, dict):  # named as for every reward's lines: never the value itself
        raise SampleError(f"expected a JSON object, got {json_type(obj)}")
    request = parse_request(obj, config)
    label = obj.get("id")
    return request, label if isinstance(label, str) else None


def _needs_text(request: ScoreRequest) -> bool:
    return request.steps is not None and bool(request.steps.texts)


def score_chunk(
    chunk: list[tuple[int, bytes]],
    config: StructureRewardConfig,
    embedder: LazyEmbedder,
    row_of: RowOf,
    *,
    cluster: Cluster | None = None,
) -> list[StructureLine]:
    """Parse and score one chunk; returns one :class:`StructureLine` per line, in order."""
    outputs: dict[int, StructureLine] = {}
    parsed: list[tuple[int, ScoreRequest]] = []
    ids: dict[int, str | None] = {}
    for number, line in chunk:
        try:
            request, ids[number] = _parse(line, config)
            parsed.append((number, request))
        except lines.LINE_ERRORS as e:
            outputs[number] = _error(number, str(e) or type(e).__name__)
    ready = [(n, r) for n, r in parsed if not _needs_text(r)]  # labels/embeddings, or no steps
    text = [(n, r) for n, r in parsed if _needs_text(r)]
    if text:
        ready += _embed(text, embedder, outputs)
    results = _score_ready([r for _, r in ready], config, cluster)
    for (number, _), result in zip(ready, results, strict=True):
        if isinstance(result, ScoringFailure):
            outputs[number] = _error(number, f"scoring failed: {result.message}")
        else:
            outputs[number] = StructureLine(number, row_of(result), result, ids.get(number))
    return [outputs[number] for number, _ in chunk]


def _score_ready(
    requests: list[ScoreRequest], config: StructureRewardConfig, cluster: Cluster | None
) -> list[StructureResult | ScoringFailure]:
    """:func:`score_isolated`'s results; with ``cluster``, the requests with embeddings are
    clustered by it (the scorer's pool) and the others (labels, no steps) scored here. Equal
    results: a request's result never depends on its batch (``score_isolated``'s contract)."""
    if cluster is None:
        return score_isolated(requests, config)
    embedded = [i for i, r in enumerate(requests) if r.embeddings is not None]
    try:
        pooled = cluster(
            [e for i in embedded if (e := requests[i].embeddings) is not None],
            [requests[i].truncated for i in embedded],
        )
    except lines.LINE_ERRORS:
        # Some line's embeddings failed the batch (validation should prevent it): score here,
        # where score_isolated gives the failure to that line alone.
        return score_isolated(requests, config)
    by_index: dict[int, StructureResult | ScoringFailure] = dict(zip(embedded, pooled, strict=True))
    others = iter(score_isolated([r for r in requests if r.embeddings is None], config))
    return [by_index[i] if i in by_index else next(others) for i in range(len(requests))]


def _error(number: int, message: str) -> StructureLine:
    return StructureLine(number, lines.line_error(number, message))


def _embed(
    text: list[tuple[int, ScoreRequest]],
    embedder: LazyEmbedder,
    outputs: dict[int, StructureLine],
) -> list[tuple[int, ScoreRequest]]:
    """The text requests with their steps embedded; on an embedder failure, each of them
    gets the error in ``outputs`` instead (the failure concerns them all)."""
    try:
        model = embedder.get()
    except (typer.Exit, RuntimeError, ValueError) as e:
        reason = str(e) or "could not build the embedder (see the message above)"
        for number, _ in text:
            outputs[number] = _error(number, f"embedder unavailable: {reason}")
        return []
    try:
        embedded = embed_requests([r for _, r in text], model)
    except (RuntimeError, ValueError) as e:  # the embedding service down, a bad reply
        for number, _ in text:
            outputs[number] = _error(number, f"embedding failed: {e}")
        return []
    return [(number, r) for (number, _), r in zip(text, embedded, strict=True)]
