"""Score the items of one reward-service request with a registered reward, item by item.

Called by :mod:`sarl_services.reward`; this is the thin adapter between HTTP and the pure
scorers in the sdk. Every item gets either its result object or ``{"error": "requests[i]:
..."}``, in request order; only whole-request problems (the embedder failing) raise. Settings
arrive validated (:mod:`sarl_services.request_settings`). Two paths:

* ``structure`` — items follow the JSON contract of :mod:`sarl.rewards.structure.requests`
  (``response``, optional ``step_labels`` / ``step_embeddings``), parsed with its
  ``parse_request`` and scored with ``embed_requests`` / ``score_isolated``, so an item that
  fails to score (e.g. extreme embeddings) fails alone; results have exactly the CLI's keys
  (``score``, ``clustering``, ``path_length``, ``num_steps``, ``num_nodes``, ``num_edges``,
  ``labels``). Items are parsed first (:func:`parse_structure`), so the service can admit the
  request by its distinct step texts before embedding anything; those are then embedded in one
  awaited call to the service's embedder (:func:`score_parsed`); clustering runs on worker
  threads.
* any other registered reward — items are samples ``{"response", "prompt"?, "ground_truth"?,
  "group"?, ...}`` (other keys reach the reward as ``Sample.extra``); results are ``{"score",
  <component>: value, ...}``. A reward that needs whole groups (TTRL, EMPO, ...) scores the
  items sharing a ``group`` value together.

CPU work runs on worker threads in chunks (``_CHUNK_SAMPLES`` items parsed, about
``_CHUNK_STEPS`` steps clustered, or ``_CHUNK_SAMPLES`` samples scored per call): when the
request is cancelled because its client has gone (:mod:`sarl_services.disconnect`), the chunk
running finishes and no other starts; a sample reward's request ends only once its chunk has
(:func:`_to_the_end`), so its slot is not handed on while its CPU is still in use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from sarl.embedding.base import Embedder, FloatArray
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import create_reward
from sarl.rewards.samples import SampleError, parse_sample
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.requests import (
    RequestError,
    ScoreRequest,
    ScoringFailure,
    embed_requests,
    parse_request,
    score_isolated,
)
from sarl.rewards.structure.result import StructureResult
from sarl.rewards.text import encodable
from sarl_services.metrics import RewardMetrics

ItemResult = dict[str, Any]
_CHUNK_STEPS = 1024  # structure: steps clustered per worker-thread call (at least one item)
_CHUNK_SAMPLES = 32  # items parsed, or samples scored (whole groups, at least one), per call
_CHUNK_TEXTS = 512  # in-process embedder: texts per call


class MeteredEmbedder:
    """The service's embedder, awaitable, with call counts, latency and texts in the metrics."""

    def __init__(self, inner: Embedder, metrics: RewardMetrics) -> None:
        self.inner = inner
        self._metrics = metrics

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        start = time.perf_counter()
        try:
            aembed = getattr(self.inner, "aembed", None)
            if aembed is not None:  # remote: awaited on the event loop, no thread held
                vectors: FloatArray = await aembed(texts)
            else:  # local model: blocking, so on worker threads, chunk by chunk
                parts = [
                    await asyncio.to_thread(self.inner.embed, texts[i : i + _CHUNK_TEXTS])
                    for i in range(0, len(texts), _CHUNK_TEXTS)
                ]
                vectors = np.concatenate(parts) if len(parts) > 1 else parts[0]
        except Exception:
            self._metrics.embedding_calls.labels(outcome="error").inc()
            raise
        finally:
            self._metrics.embedding_latency.observe(time.perf_counter() - start)
        self._metrics.embedding_calls.labels(outcome="ok").inc()
        self._metrics.embedding_texts.inc(len(texts))
        return vectors


class _Fetched:
    """An :class:`Embedder` answering from vectors fetched before ``embed_requests`` runs.

    ``embed_requests`` is synchronous and runs on a worker thread; the embedding call itself is
    awaited on the event loop beforehand, so a slow embedding endpoint holds no thread.
    """

    def __init__(self, texts: list[str], vectors: FloatArray) -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = vectors  # (len(texts), dim)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return self._vectors[[self._row[t] for t in texts]]


def _parse_structure(
    items: list[Any], config: StructureRewardConfig, first: int
) -> list[ScoreRequest | str]:
    """Items ``first, first + 1, ...`` as requests, or their error messages."""
    parsed: list[ScoreRequest | str] = []
    for i, item in enumerate(items, start=first):
        try:
            parsed.append(parse_request(item, config))
        except RequestError as e:
            parsed.append(f"requests[{i}]: {e}")
    return parsed


def _steps(request: ScoreRequest) -> int:
    if request.embeddings is not None:
        return len(request.embeddings)
    return len(request.labels or ())


def _structure_chunks(requests: list[ScoreRequest]) -> Iterator[list[ScoreRequest]]:
    """Consecutive requests, about ``_CHUNK_STEPS`` steps per chunk (at least one request)."""
    chunk: list[ScoreRequest] = []
    steps = 0
    for request in requests:
        if chunk and steps + _steps(request) > _CHUNK_STEPS:
            yield chunk
            chunk, steps = [], 0
        chunk.append(request)
        steps += _steps(request)
    if chunk:
        yield chunk


@dataclass(frozen=True)
class ParsedStructure:
    """The items of a structure request, parsed: a request or an error message per item, the
    distinct step texts to embed, and the steps that came with their embeddings or labels."""

    parsed: list[ScoreRequest | str]
    texts: list[str]
    given_steps: int = 0

    @property
    def work(self) -> int:
        """The request's work, for admission: a text to embed or a given step counts one (steps
        given with embeddings are still clustered: 60 such 4 MiB requests, never admitted,
        were answered up to 101 s late against a 10 s deadline)."""
        return len(self.texts) + self.given_steps


async def parse_structure(items: list[Any], config: StructureRewardConfig) -> ParsedStructure:
    """Parse items on worker threads, ``_CHUNK_SAMPLES`` per call."""
    parsed: list[ScoreRequest | str] = []
    for start in range(0, len(items), _CHUNK_SAMPLES):
        chunk = items[start : start + _CHUNK_SAMPLES]
        parsed += await asyncio.to_thread(_parse_structure, chunk, config, start)
    # embed_requests sends each step as encodable(text) (lone surrogates replaced), so the
    # vectors are fetched and looked up under the same strings.
    texts = dict.fromkeys(
        encodable(t)
        for p in parsed
        if isinstance(p, ScoreRequest) and p.steps is not None
        for t in p.steps.texts
    )
    given = sum(_steps(p) for p in parsed if isinstance(p, ScoreRequest) and p.steps is None)
    return ParsedStructure(parsed, list(texts), given)


async def score_parsed(
    structure: ParsedStructure, config: StructureRewardConfig, embedder: MeteredEmbedder
) -> list[ItemResult]:
    """Embed and score parsed items; an embedder failure raises (the caller's 502)."""
    texts = structure.texts
    valid = [p for p in structure.parsed if isinstance(p, ScoreRequest)]
    fetched = _Fetched(texts, await embedder.aembed(texts)) if texts else None
    embedded = await asyncio.to_thread(embed_requests, valid, fetched)
    scored: list[StructureResult | ScoringFailure] = []
    for chunk in _structure_chunks(embedded):
        scored += await asyncio.to_thread(score_isolated, chunk, config)
    results = iter(scored)
    out: list[ItemResult] = []
    for i, p in enumerate(structure.parsed):
        result = p if isinstance(p, str) else next(results)
        if isinstance(result, str):
            out.append({"error": result})
        elif isinstance(result, ScoringFailure):
            out.append({"error": f"requests[{i}]: {result.message}"})
        else:
            out.append(result.to_dict())
    return out


GroupKey = str | int | None


def _sample(item: Any) -> tuple[Sample, GroupKey]:
    """An item as a :class:`Sample` (the sdk's sample contract; other keys but ``group`` go to
    ``Sample.extra``) and its group key."""
    sample = parse_sample(item, exclude=("group",))
    group = item.get("group")
    if isinstance(group, bool) or not isinstance(group, str | int | None):
        raise SampleError("group: expected a string or an integer")
    return sample, group


def _output(out: RewardOutput) -> ItemResult:
    return {"score": out.score, **out.components}  # NaN components serialise as null


def _score_groups(reward: Reward, groups: list[list[Sample]]) -> list[list[ItemResult | str]]:
    """Score all groups in one call; if that fails, group by group, so each failure lands on
    the group that caused it (a lone sample, for per-sample rewards)."""
    try:
        return [[_output(o) for o in group] for group in reward.score_groups(groups)]
    except Exception as e:  # reward code is arbitrary; one bad group must not fail the others
        if len(groups) == 1:
            return [[f"{type(e).__name__}: {e}"] * len(groups[0])]
    return [_score_groups(reward, [group])[0] for group in groups]


def _group_chunks(groups: list[list[Sample]]) -> Iterator[list[list[Sample]]]:
    """Consecutive whole groups, about ``_CHUNK_SAMPLES`` samples per chunk (at least one)."""
    chunk: list[list[Sample]] = []
    samples = 0
    for group in groups:
        if chunk and samples + len(group) > _CHUNK_SAMPLES:
            yield chunk
            chunk, samples = [], 0
        chunk.append(group)
        samples += len(group)
    if chunk:
        yield chunk


async def _to_the_end(reward: Reward, chunk: list[list[Sample]]) -> list[list[ItemResult | str]]:
    """Score ``chunk`` on a worker thread. Cancelled (the client left, the server stops), the
    reward is closed at once (its verifier workers stop: :meth:`Reward.close`) and the thread
    awaited before the cancellation goes on: the request's slot and admission ticket stay held
    while its CPU work still runs (before: freed at once, 30 CPU-seconds burning behind them)."""
    work = asyncio.ensure_future(asyncio.to_thread(_score_groups, reward, chunk))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        reward.close()
        await asyncio.wait({work})
        raise


async def score_generic(name: str, items: list[Any], settings: BaseModel) -> list[ItemResult]:
    """Score items as samples with the registered reward ``name`` and validated ``settings``.

    Per-sample rewards score each item alone. A reward that ``needs_group`` gets the items with
    equal ``group`` values as one group (items without ``group`` form one group together).
    """
    reward = create_reward(name, settings)
    results: dict[int, ItemResult] = {}
    groups: dict[object, list[tuple[int, Sample]]] = {}
    for i, item in enumerate(items):
        try:
            sample, key = _sample(item)
        except SampleError as e:
            results[i] = {"error": f"requests[{i}]: {e}"}
            continue
        groups.setdefault(key if reward.needs_group else i, []).append((i, sample))
    members = list(groups.values())
    scored: list[list[ItemResult | str]] = []
    try:
        for chunk in _group_chunks([[s for _, s in group] for group in members]):
            scored += await _to_the_end(reward, chunk)
    finally:
        reward.close()
    for group, outs in zip(members, scored, strict=True):
        for (i, _), out in zip(group, outs, strict=True):
            results[i] = {"error": f"requests[{i}]: {out}"} if isinstance(out, str) else out
    return [results[i] for i in range(len(items))]
