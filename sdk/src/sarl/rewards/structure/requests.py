"""Validate and score JSON scoring requests — the contract shared by ``sarl reward score structure``
(one JSON object per input line) and, later, the reward service (a JSON batch per HTTP request).

A request is an object with:

* ``response`` (string): the text; its ``<think>`` block is split into steps;
* optional ``step_labels`` (list of ints >= 0): the cluster of each step — embedding and
  clustering are skipped;
* optional ``step_embeddings`` (list of equal-length number lists): one vector per step —
  embedding is skipped, clustering runs.

When ``response`` is given with labels/embeddings, their count must equal the number of steps
the response splits into (before the ``max_steps`` cap; longer inputs are capped like text).
Without ``response``, labels/embeddings alone describe the steps (``response`` is then not
needed). Giving both ``step_labels`` and ``step_embeddings`` is an error. Other fields (prompt,
ids, answers) are ignored, so dataset rows can be scored as they are. Every problem becomes a
:class:`RequestError` naming the field and value; one bad request never fails the others.

Embedding values may be any finite float64 (|x| <= 1.8e308, 5e-324 included: clustering uses
each row's direction and scales extreme rows safely); an integer beyond float64's range is
refused like a non-finite number. :func:`score_isolated` scores validated requests so that one
request failing (which validation should already prevent) is that request's failure only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sarl.embedding.base import Embedder
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.result import StructureResult
from sarl.rewards.structure.scorer import score_embeddings_batch, score_labels
from sarl.rewards.structure.segmentation import Steps, extract_steps
from sarl.rewards.text import encodable

_MAX_SHOWN = 60


class RequestError(ValueError):
    """A scoring request is malformed; the message names the field and the offending value."""


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """A validated request: one of ``steps`` (to embed), ``labels`` or ``embeddings`` is set."""

    steps: Steps | None = None
    labels: tuple[int, ...] | None = None
    embeddings: npt.NDArray[np.floating[Any]] | None = None
    truncated: bool = False


def _show(value: Any) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, str) else repr(value)
    except (ValueError, RecursionError):  # an int past Python's digit limit, deep nesting
        text = f"a {type(value).__name__}"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _finite(x: Any) -> bool:
    """Whether a decoded JSON value is a number float64 holds finitely (bool is not a number)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    try:
        return math.isfinite(x)  # an int is converted: OverflowError past ~1.8e308
    except OverflowError:
        return False


def _labels(value: Any) -> list[int]:
    if not isinstance(value, list):
        raise RequestError(f"step_labels: expected a list of integers, got {_show(value)}")
    for i, item in enumerate(value):
        # JSON true/false arrive as bool, a subclass of int: not a cluster id.
        if isinstance(item, bool) or not isinstance(item, int):
            raise RequestError(f"step_labels[{i}]: expected an integer >= 0, got {_show(item)}")
        if item < 0:
            raise RequestError(f"step_labels[{i}]: expected an integer >= 0, got {item}")
    return value


def _embeddings(value: Any) -> npt.NDArray[np.float64]:
    if not isinstance(value, list):
        raise RequestError(f"step_embeddings: expected a list of number lists, got {_show(value)}")
    dim: int | None = None
    for i, row in enumerate(value):
        if not isinstance(row, list) or not row:
            raise RequestError(
                f"step_embeddings[{i}]: expected a non-empty list of numbers, got {_show(row)}"
            )
        if dim is not None and len(row) != dim:
            raise RequestError(f"step_embeddings[{i}]: has {len(row)} values, step 0 has {dim}")
        dim = len(row)
        for j, x in enumerate(row):
            if not _finite(x):
                raise RequestError(
                    f"step_embeddings[{i}][{j}]: expected a finite number (float64: "
                    f"|x| <= 1.8e308), got {_show(x)}"
                )
        if not any(row):
            raise RequestError(f"step_embeddings[{i}]: is a zero vector and cannot be normalised")
    return np.asarray(value, dtype=np.float64).reshape(len(value), dim or 0)


def parse_request(obj: Any, config: StructureRewardConfig) -> ScoreRequest:
    """Validate one decoded JSON value as a scoring request."""
    if not isinstance(obj, dict):
        raise RequestError(f"expected a JSON object, got {_show(obj)}")
    if "step_labels" in obj and "step_embeddings" in obj:
        raise RequestError("give either step_labels or step_embeddings, not both")
    response = obj.get("response")
    if "response" in obj and not isinstance(response, str):
        raise RequestError(f"response: expected a string, got {_show(response)}")
    given = (
        "step_labels"
        if "step_labels" in obj
        else ("step_embeddings" if "step_embeddings" in obj else None)
    )
    if response is None and given is None:
        raise RequestError("response: missing (or give step_labels / step_embeddings)")
    steps = extract_steps(response, config) if isinstance(response, str) else None
    if given is None and steps is not None:
        return ScoreRequest(steps=steps, truncated=steps.truncated)
    per_step: list[int] | npt.NDArray[np.float64] = (
        _labels(obj["step_labels"]) if given == "step_labels" else _embeddings(obj[given])
    )
    if isinstance(response, str):
        n_text = _count_steps(response, config)
        if len(per_step) != n_text:
            raise RequestError(
                f"{given}: has {len(per_step)} entries but the response has {n_text} steps"
            )
    truncated = len(per_step) > config.max_steps
    capped = per_step[: config.max_steps]
    if given == "step_labels":
        return ScoreRequest(labels=tuple(int(x) for x in capped), truncated=truncated)
    return ScoreRequest(embeddings=np.asarray(capped), truncated=truncated)


def _count_steps(response: str, config: StructureRewardConfig) -> int:
    """Steps in the response before the ``max_steps`` cap."""
    uncapped = config.model_copy(update={"max_steps": 2**31 - 1})
    return len(extract_steps(response, uncapped).texts)


def score_requests(
    requests: Sequence[ScoreRequest], config: StructureRewardConfig, embedder: Embedder | None
) -> list[StructureResult]:
    """Score validated requests in order: labels directly; text embedded in one embedder call;
    all embeddings clustered as one batch. Embedder failures propagate (the caller decides
    which requests they fail)."""
    return _score_batch(embed_requests(requests, embedder), config)


def embed_requests(
    requests: Sequence[ScoreRequest], embedder: Embedder | None
) -> list[ScoreRequest]:
    """The requests with the steps of every text request embedded, in one embedder call; the
    others unchanged. Embedder failures propagate: they concern every text request at once."""
    need_text = [r.steps for r in requests if r.steps is not None and r.steps.texts]
    if not need_text:
        return list(requests)
    if embedder is None:
        raise RequestError(
            "embedder: a response without step_labels/step_embeddings needs an embedder"
        )
    flat = [encodable(t) for s in need_text for t in s.texts]  # UTF-8 safe: sarl.rewards.text
    vectors = embedder.embed(flat)
    if vectors.shape[0] != len(flat):
        raise RequestError(f"embedder returned {vectors.shape[0]} vectors for {len(flat)} steps")
    out: list[ScoreRequest] = []
    start = 0
    for r in requests:
        if r.steps is not None and r.steps.texts:
            n = len(r.steps.texts)
            out.append(ScoreRequest(embeddings=vectors[start : start + n], truncated=r.truncated))
            start += n
        else:
            out.append(r)
    return out


@dataclass(frozen=True, slots=True)
class ScoringFailure:
    """Why one request could not be scored; the other requests of its batch were."""

    message: str


#: What scoring one malformed request can raise (anything else is a bug and propagates).
_ITEM_ERRORS = (ValueError, ArithmeticError, RecursionError)


def score_isolated(
    requests: Sequence[ScoreRequest], config: StructureRewardConfig
) -> list[StructureResult | ScoringFailure]:
    """Score requests without text to embed (see :func:`embed_requests`) as one batch; if the
    batch fails, score each request alone, so a failure belongs to the request that caused it
    and never changes another's result (a request's result never depends on its batch)."""
    try:
        return list(_score_batch(requests, config))
    except _ITEM_ERRORS:
        return [_score_alone(r, config) for r in requests]


def _score_alone(
    request: ScoreRequest, config: StructureRewardConfig
) -> StructureResult | ScoringFailure:
    try:
        return _score_batch([request], config)[0]
    except _ITEM_ERRORS as e:
        return ScoringFailure(str(e) or type(e).__name__)


def _score_batch(
    requests: Sequence[ScoreRequest], config: StructureRewardConfig
) -> list[StructureResult]:
    """Score requests whose steps are embedded already: embeddings clustered as one batch."""
    if any(r.steps is not None and r.steps.texts for r in requests):
        # A caller's bug, not a bad request: not one of _ITEM_ERRORS, so it propagates.
        raise RuntimeError("text requests must be embedded first (embed_requests)")
    vectors_by_request = {
        i: r.embeddings for i, r in enumerate(requests) if r.embeddings is not None
    }
    order = sorted(vectors_by_request)
    clustered = dict(
        zip(
            order,
            score_embeddings_batch(
                [vectors_by_request[i] for i in order],
                config,
                truncated=[requests[i].truncated for i in order],
            ),
            strict=True,
        )
    )
    out: list[StructureResult] = []
    for i, r in enumerate(requests):
        if i in clustered:
            out.append(clustered[i])
        else:  # labels given, or zero steps
            out.append(score_labels(r.labels or (), config, truncated=r.truncated))
    return out
