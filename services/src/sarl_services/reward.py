"""The reward service: every registered reward over HTTP, on the KServe model server.

Started by ``sarl serve reward`` (:mod:`sarl_services.cli`); trainers' reward adapters call it.
Routes:

* ``POST /v1/rewards/{name}`` with ``{"requests": [item, ...], "settings": {...}?}`` ->
  ``{"results": [result | {"error": "requests[i]: ..."}, ...]}`` in request order (items and
  results per reward: :mod:`sarl_services.scoring`). A bad item gets its own error and never
  fails the others. Whole-request problems get an OpenAI-style error body naming the field:
  400 (not JSON, ``requests`` not a list, unknown top-level key, invalid ``settings``: only
  the scoring knobs of :mod:`sarl_services.request_settings` and within their maxima), 404
  (unknown reward; the message lists the known ones), 413 (body over ``--max-body-bytes``, from
  ``Content-Length`` or while reading; more than ``--max-items`` items), 503 + Retry-After
  (still loading: type ``not_ready``; overloaded: type ``overloaded``, see below), 502 (the
  embedder failed: the whole request fails, so a trainer retries it rather than mistaking an
  outage for bad responses). A request whose client disconnects leaves the queue or stops
  scoring (:mod:`sarl_services.disconnect`).
* ``GET /v1/rewards``: the registered reward names.
* KServe's routes: ``GET /v1/models/<name>`` readiness (503 until ``load()`` ran), V2 health,
  and ``GET /metrics`` with the counters of :class:`~sarl_services.metrics.RewardMetrics`;
  every other KServe route is closed (:mod:`sarl_services.routes`).

``load()`` builds the step embedder once (``--embedder local``: loads the model; ``openai``: a
client of an OpenAI-compatible endpoint such as ``sarl serve embedding``) and sets ``ready``.

Overload, two gates before any embedding: (1) admission by work (:mod:`sarl_services.admission`,
first come first served): a structure request's work is its distinct step texts, since
embedding them dominates its cost, plus the steps given with their embeddings or labels (still
clustered); the rate is measured over whole admitted requests (texts
completed per second with any of them under way: embedding service and its queue, clustering
and all included); a request whose expected completion passes ``--deadline-s`` gets 503
``overloaded`` with Retry-After. Every other reward is admitted by expected time, in seconds,
on one of two queues of its own — cheap rewards (``ground_truth``, ...) and expensive ones
(verifiers, judges, group rewards), so the second cannot starve the first
(:mod:`sarl_services.item_costs`: measured seconds per item of each reward, bounded for
``ground_truth_math_verify`` by its ``timeout_seconds``, groups costed by their size); a
math-verify request whose worst case (items × ``timeout_seconds`` / workers) passes
``--max-verify-s``, or a group reward's group over ``--max-group-size`` items, is refused up
front with 413, asking the client to split it. (2) the count limit
(:mod:`sarl_services.limits`), for structure and for each lane apart: ``--max-concurrency``
scored at once, ``--max-queue`` waiting.
Shed requests are counted in ``sarl_reward_shed_total{reward, reason}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import kserve
import orjson
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from sarl.embedding.base import Embedder
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.rewards.registry import get_reward_class, reward_names
from sarl.rewards.structure.config import StructureRewardConfig
from sarl_services.admission import Admission, BusyMeter, Overloaded, RateEstimator
from sarl_services.body import BodyReader
from sarl_services.connections import ConnectionLimits
from sarl_services.disconnect import unless_disconnected
from sarl_services.errors import BadRequest, NotFound, PayloadTooLarge, not_ready, service_route
from sarl_services.item_costs import (
    ItemCosts,
    Lane,
    group_sizes,
    lane,
    work_units,
    worst_item_s,
)
from sarl_services.limits import ConcurrencyLimiter
from sarl_services.metrics import RewardMetrics
from sarl_services.request_settings import (
    RequestSettingsPolicy,
    reward_settings_model,
    validate_settings,
)
from sarl_services.scoring import (
    ItemResult,
    MeteredEmbedder,
    parse_structure,
    score_generic,
    score_parsed,
)

_TOP_LEVEL_KEYS = ("requests", "settings")
# Embedding throughput assumed before the first call completes (texts/s): a slow CPU, so the
# first requests are not over-admitted; measured calls outweigh it within seconds.
_PRIOR_TEXTS_PER_S = 20.0


@dataclass(frozen=True)
class RewardServiceSettings:
    """Settings of ``sarl serve reward`` (parsed by the CLI command)."""

    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    name: str = "sarl-reward"  # the KServe model name (readiness: GET /v1/models/<name>)
    max_concurrency: int = 4  # requests scored at once
    max_queue: int = 64  # requests waiting for a slot; beyond: 503
    deadline_s: float = 10.0  # admission: expected completion past this gets 503
    max_body_bytes: int = 32 * 2**20
    max_items: int = 1024  # items per request; beyond: 413
    max_verify_s: float = 60.0  # a math-verify request's worst case (items x timeout); beyond: 413
    max_group_size: int = 256  # items per group of a group reward (TTRL, EMPO); beyond: 413
    # Deployment-time settings per reward (``--reward-settings NAME=FILE``), e.g. the judge
    # endpoint of structured_qa; a request's settings go on top, within ``request_settings``.
    reward_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    # What a request may set, and the maxima (``--max-setting``): request_settings.py.
    request_settings: RequestSettingsPolicy = field(default_factory=RequestSettingsPolicy)

    def __post_init__(self) -> None:
        for option in ("max_concurrency", "max_body_bytes", "max_items", "max_group_size"):
            value = getattr(self, option)
            if value < 1:
                raise ValueError(f"--{option.replace('_', '-')}: must be >= 1, got {value}")
        if self.max_queue < 0:
            raise ValueError(f"--max-queue: must be >= 0, got {self.max_queue}")
        if not (self.max_verify_s > 0 and math.isfinite(self.max_verify_s)):
            raise ValueError(
                f"--max-verify-s: must be a number of seconds > 0, got {self.max_verify_s}"
            )
        if not (self.deadline_s > 0 and math.isfinite(self.deadline_s)):
            raise ValueError(
                f"--deadline-s: must be a number of seconds > 0, got {self.deadline_s}"
            )


def parse_body(payload: dict[str, Any], max_items: int) -> tuple[list[Any], dict[str, Any] | None]:
    """Check the top level of a request body; return its items and settings."""
    unknown = sorted(set(payload) - set(_TOP_LEVEL_KEYS))
    if unknown:
        raise BadRequest(
            f"unknown field {unknown[0]!r}; the body has 'requests' and optional 'settings'",
            param=unknown[0],
        )
    items = payload.get("requests")
    if not isinstance(items, list):
        raise BadRequest("requests: required, a list of items to score", param="requests")
    if len(items) > max_items:
        raise PayloadTooLarge(
            f"requests: {len(items)} items; the limit is {max_items} per request (--max-items)",
            param="requests",
        )
    settings = payload.get("settings")
    if settings is not None and not isinstance(settings, dict):
        raise BadRequest("settings: expected an object of reward settings", param="settings")
    return items, settings


def check_reward(name: str) -> None:
    """404 unless ``name`` is registered (dotted ``module:Class`` paths are never imported)."""
    known = reward_names()
    if name not in known:
        raise NotFound(
            f"reward {name!r} is not registered; known: {', '.join(known)}", param="name"
        )


class RewardModel(kserve.Model):  # type: ignore[misc]  # kserve ships no type hints
    """The KServe model: ``load()`` builds the step embedder, then sets ``ready``; holds the
    admission (work) and the limiter (count) every request passes."""

    def __init__(
        self,
        settings: RewardServiceSettings,
        metrics: RewardMetrics,
        *,
        admission: Admission | None = None,  # tests: a known rate
    ) -> None:
        super().__init__(settings.name)
        self.settings = settings
        self._metrics = metrics
        self._embedder: MeteredEmbedder | None = None
        if admission is None:
            rate = RateEstimator(_PRIOR_TEXTS_PER_S)
            admission = Admission(settings.deadline_s, rate, fair=False, unit="texts")
        self.admission = admission
        # The rate: texts of admitted requests completed per second with any of them under
        # way, i.e. what the whole path delivers (waiting for a slot, the embedding service and
        # its queue, clustering), not the embedder alone.
        self._busy = BusyMeter(self.admission.rate)
        # Sample rewards: work in expected seconds, so the rate is 1 (never observed); the
        # per-reward measurements are in the cost model. One queue and one set of slots per
        # lane (item_costs.lane): expensive rewards cannot hold a cheap one up.
        self.sample_lanes: dict[Lane, tuple[Admission, ConcurrencyLimiter]] = {
            key: (
                Admission(settings.deadline_s, RateEstimator(1.0), fair=False, unit="s"),
                ConcurrencyLimiter(settings.max_concurrency, settings.max_queue),
            )
            for key in ("cheap", "expensive")
        }
        self.costs = ItemCosts()
        self.limiter = ConcurrencyLimiter(settings.max_concurrency, settings.max_queue)

    def load(self) -> bool:
        inner = make_embedder(self.settings.embedder)
        if self.settings.embedder.kind == "local":
            inner.embed(["warm-up"])  # load the weights now: ready means ready to score
        self.use_embedder(inner)
        return True

    def use_embedder(self, inner: Embedder) -> None:
        """Score with ``inner`` from now on and set ``ready`` (``load()``; tests: a fake)."""
        self._embedder = MeteredEmbedder(inner, self._metrics)
        self.ready = True

    def reward_settings(self, name: str, requested: dict[str, Any] | None) -> BaseModel:
        """The settings reward ``name`` scores this request with: the service's defaults with
        the request's allowed settings on top, validated (400 naming the field)."""
        self.settings.request_settings.check(name, requested)
        merged = {**self.settings.reward_defaults.get(name, {}), **(requested or {})}
        return validate_settings(reward_settings_model(name), merged, requested)

    async def score(self, name: str, items: list[Any], settings: BaseModel) -> list[ItemResult]:
        """Admit, queue and score ``items`` with reward ``name``; one result or error object per
        item. :class:`~sarl_services.admission.Overloaded` when refused."""
        if not isinstance(settings, StructureRewardConfig):
            return await self._score_samples(name, items, settings)
        if self._embedder is None:  # reward "structure" (its scoring part)
            raise not_ready("reward service")
        self.limiter.ensure_room()  # a full queue refuses before any parsing, as before
        structure = await parse_structure(items, settings)
        # Admitted also when nothing is to be embedded: given steps are still clustered.
        ticket = self.admission.admit(structure.work)
        self._busy.begin()
        done: int | None = None
        try:
            async with self.limiter.slot():
                results = await score_parsed(structure, settings, self._embedder)
            done = structure.work
            return results
        finally:
            self._busy.end(done)
            self.admission.release(ticket)

    async def _score_samples(
        self, name: str, items: list[Any], settings: BaseModel
    ) -> list[ItemResult]:
        """Any reward but ``structure``: bounded (math-verify's worst case), admitted by
        expected seconds, measured, then scored in a slot."""
        worst = worst_item_s(settings)
        if worst is not None and worst * len(items) > self.settings.max_verify_s:
            raise PayloadTooLarge(
                f"requests: {len(items)} items may take up to {worst * len(items):.0f} s of "
                "math-verify (items x settings.timeout_seconds / workers), more than this "
                f"service's {self.settings.max_verify_s:g} s per request (--max-verify-s); "
                "split the request or lower settings.timeout_seconds",
                param="requests",
            )
        units: float = len(items)
        if get_reward_class(name).needs_group:
            sizes = group_sizes(items)
            self._check_groups(max(sizes, default=0))
            units = work_units(sizes)
        admission, limiter = self.sample_lanes[lane(name)]
        limiter.ensure_room()
        ticket = admission.admit(self.costs.expected_s(name, settings, units))
        meter = self.costs.meter(name)
        meter.begin()
        done: float | None = None
        try:
            async with limiter.slot():
                results = await score_generic(name, items, settings)
            done = units
            return results
        finally:
            meter.end(done)
            admission.release(ticket)

    def _check_groups(self, largest: int) -> None:
        """413 for a group over ``--max-group-size`` (see :mod:`sarl_services.item_costs`)."""
        if largest > self.settings.max_group_size:
            raise PayloadTooLarge(
                f"requests: a group of {largest} items; the limit is "
                f"{self.settings.max_group_size} items per group (--max-group-size), since a "
                "group reward's work grows with the square of its group; split the group",
                param="requests",
            )


def build_router(model: RewardModel, metrics: RewardMetrics) -> APIRouter:
    """The reward routes; request counts, latency, errors and shed requests go to ``metrics``."""
    settings = model.settings
    bodies = BodyReader(settings.max_body_bytes)  # one budget for the process's bodies

    def observe(request: Request, status: int, kind: str | None, seconds: float) -> None:
        name = request.path_params.get("name")
        label = name if name in reward_names() else "unknown"  # bounded label values
        metrics.requests.labels(reward=label, status=str(status)).inc()
        metrics.latency.labels(reward=label).observe(seconds)
        if kind is not None:
            metrics.errors.labels(reward=label, type=kind).inc()

    async def score(name: str, request: Request) -> Response:
        """Score with reward ``name``: ``{"requests": [item, ...], "settings"?: {...}}`` ->
        ``{"results": [...]}``, one entry per item in order: its result or ``{"error":
        "requests[i]: ..."}`` (a bad item never fails the others)."""
        if not model.ready:
            raise not_ready("reward service")
        check_reward(name)
        async with bodies.json_object(request) as payload:  # in the body budget until scored
            items, requested = parse_body(payload, settings.max_items)
            reward_settings = model.reward_settings(name, requested)
            try:
                scoring = model.score(name, items, reward_settings)
                results = await unless_disconnected(request, scoring)
            except Overloaded as e:
                metrics.shed.labels(reward=name, reason=e.reason).inc()
                raise
        failed = sum(1 for r in results if "error" in r)
        metrics.items.labels(reward=name).inc(len(results) - failed)
        metrics.item_errors.labels(reward=name).inc(failed)
        return Response(orjson.dumps({"results": results}), media_type="application/json")

    async def list_rewards() -> Response:
        """The registered reward names: ``{"rewards": [name, ...]}``."""
        return Response(orjson.dumps({"rewards": reward_names()}), media_type="application/json")

    router = APIRouter(route_class=service_route())
    router.add_api_route("/v1/rewards", list_rewards, methods=["GET"])
    router.add_api_route(
        "/v1/rewards/{name}", score, methods=["POST"], route_class_override=service_route(observe)
    )
    return router


def serve_reward(
    settings: RewardServiceSettings,
    *,
    host: str,
    port: int,
    load_delay_s: float = 0.0,
    connections: ConnectionLimits | None = None,
    api_key: str = "",
) -> None:
    """Build the model, routes and metrics; serve until stopped (``sarl serve``)."""
    from sarl_services.server import serve

    metrics = RewardMetrics.create()
    model = RewardModel(settings, metrics)
    limiters = [model.limiter, *(limiter for _, limiter in model.sample_lanes.values())]
    admission = model.admission
    metrics.in_flight.set_function(lambda: sum(limiter.running for limiter in limiters))
    metrics.queued.set_function(lambda: sum(limiter.waiting for limiter in limiters))
    metrics.queued_texts.set_function(lambda: admission.queued_work)
    metrics.expected_wait.set_function(admission.drain_s)
    metrics.rate.set_function(lambda: admission.rate.per_s)
    serve(
        model,
        build_router(model, metrics),
        host=host,
        port=port,
        load_delay_s=load_delay_s,
        connections=connections,
        api_key=api_key,
    )
