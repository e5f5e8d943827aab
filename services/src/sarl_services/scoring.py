"""Score the items of one reward-service request with a registered reward, item by item.

Called by :mod:`sarl_services.reward`; this is the thin adapter between HTTP and the pure
scorers in the sdk. Every item gets either its result object or ``{"error": "requests[i]:
..."}``, in request order; only whole-request problems (bad settings, the embedder failing)
raise. Two paths:

* ``structure`` — items follow the JSON contract of :mod:`sarl.rewards.structure.requests`
  (``response``, optional ``step_labels`` / ``step_embeddings``), parsed and scored with its
  ``parse_request`` / ``score_requests``; results have exactly the CLI's keys (``score``,
  ``clustering``, ``path_length``, ``num_steps``, ``num_nodes``, ``num_edges``, ``labels``).
  The distinct step texts of all items are embedded in one awaited call to the service's
  embedder; clustering runs on a worker thread.
* any other registered reward — items are samples ``{"response", "prompt"?, "ground_truth"?,
  "group"?, ...}`` (other keys reach the reward as ``Sample.extra``); results are ``{"score",
  <component>: value, ...}``. A reward that needs whole groups (TTRL, EMPO, ...) scores the
  items sharing a ``group`` value together.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from sarl.embedding.base import Embedder, FloatArray
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import RewardConfigError, create_reward
from sarl.rewards.samples import SampleError, parse_sample
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.requests import (
    RequestError,
    ScoreRequest,
    parse_request,
    score_requests,
)
from sarl_services.errors import BadRequest
from sarl_services.metrics import RewardMetrics

ItemResult = dict[str, Any]
# Settings of the structure reward that belong to the service, not to a request: a client must
# not be able to point the service's embedder at another URL, nor start process pools.
_SERVICE_ONLY_SETTINGS = ("embedder", "workers")


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
            else:  # local model: blocking, so on a worker thread
                vectors = await asyncio.to_thread(self.inner.embed, texts)
        except Exception:
            self._metrics.embedding_calls.labels(outcome="error").inc()
            raise
        finally:
            self._metrics.embedding_latency.observe(time.perf_counter() - start)
        self._metrics.embedding_calls.labels(outcome="ok").inc()
        self._metrics.embedding_texts.inc(len(texts))
        return vectors


class _Fetched:
    """An :class:`Embedder` answering from vectors fetched before ``score_requests`` runs.

    ``score_requests`` is synchronous and runs on a worker thread; the embedding call itself is
    awaited on the event loop beforehand, so a slow embedding endpoint holds no thread.
    """

    def __init__(self, texts: list[str], vectors: FloatArray) -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = vectors  # (len(texts), dim)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return self._vectors[[self._row[t] for t in texts]]


def structure_config(settings: dict[str, Any] | None) -> StructureRewardConfig:
    """The request's ``settings`` as the structure reward's scoring config (400 naming a field)."""
    for key in _SERVICE_ONLY_SETTINGS:
        if settings and key in settings:
            raise BadRequest(
                f"settings.{key}: set when the service starts (sarl serve reward --help), "
                "not per request",
                param=f"settings.{key}",
            )
    try:
        return StructureRewardConfig.model_validate(settings or {})
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in ("settings", *first["loc"]))
        raise BadRequest(
            f"{field}: {first['msg']} (got {first.get('input')!r})", param=field
        ) from e


def _parse_structure(items: list[Any], config: StructureRewardConfig) -> list[ScoreRequest | str]:
    parsed: list[ScoreRequest | str] = []
    for i, item in enumerate(items):
        try:
            parsed.append(parse_request(item, config))
        except RequestError as e:
            parsed.append(f"requests[{i}]: {e}")
    return parsed


async def score_structure(
    items: list[Any], settings: dict[str, Any] | None, embedder: MeteredEmbedder
) -> list[ItemResult]:
    """Score items with the structure reward; an embedder failure raises (the caller's 502)."""
    config = structure_config(settings)
    parsed = await asyncio.to_thread(_parse_structure, items, config)
    valid = [p for p in parsed if isinstance(p, ScoreRequest)]
    texts = list(dict.fromkeys(t for p in valid if p.steps is not None for t in p.steps.texts))
    fetched = _Fetched(texts, await embedder.aembed(texts)) if texts else None
    results = iter(await asyncio.to_thread(score_requests, valid, config, fetched))
    return [{"error": p} if isinstance(p, str) else next(results).to_dict() for p in parsed]


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


# Settings that would make the service call out to a caller-chosen host (judge/teacher/embedding
# endpoints) or load a caller-chosen model: fixed at deployment, never per request (SSRF).
_ENDPOINT_KEYS = frozenset({"url", "base_url", "judge_client", "embedder", "model", "workers"})


def refuse_endpoint_settings(settings: object, path: str = "settings") -> None:
    """Raise RewardConfigError (-> 400) when per-request settings name an endpoint or model."""
    if isinstance(settings, dict):
        for key, value in settings.items():
            if key in _ENDPOINT_KEYS:
                raise RewardConfigError(
                    f"{path}.{key}: endpoints and models are fixed when the service is "
                    "deployed and cannot be set per request"
                )
            refuse_endpoint_settings(value, f"{path}.{key}")
    elif isinstance(settings, list):
        for i, value in enumerate(settings):
            refuse_endpoint_settings(value, f"{path}[{i}]")


async def score_generic(
    name: str, items: list[Any], settings: dict[str, Any] | None
) -> list[ItemResult]:
    """Score items as samples with the registered reward ``name``.

    Per-sample rewards score each item alone. A reward that ``needs_group`` gets the items with
    equal ``group`` values as one group (items without ``group`` form one group together).
    """
    reward = create_reward(name, settings)  # RewardConfigError -> 400
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
    try:
        scored = await asyncio.to_thread(
            _score_groups, reward, [[s for _, s in group] for group in members]
        )
    finally:
        reward.close()
    for group, outs in zip(members, scored, strict=True):
        for (i, _), out in zip(group, outs, strict=True):
            results[i] = {"error": f"requests[{i}]: {out}"} if isinstance(out, str) else out
    return [results[i] for i in range(len(items))]
