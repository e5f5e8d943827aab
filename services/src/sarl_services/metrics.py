"""Prometheus metrics of the embedding server and the reward service.

Created when ``sarl serve`` starts a service (:mod:`sarl_services.cli`), never at import
time, and registered with prometheus_client's default registry, which KServe already serves on
``GET /metrics``. Tests pass a fresh :class:`~prometheus_client.CollectorRegistry` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

# Seconds; reward requests span ~1 ms (labels only) to tens of seconds (large text batches).
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_BATCH_TEXTS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class RewardMetrics:
    """What the reward service counts; ``reward`` labels are registered names or ``unknown``."""

    requests: Counter  # reward, status
    latency: Histogram  # reward
    errors: Counter  # reward, type (the error body's "type")
    items: Counter  # reward
    item_errors: Counter  # reward
    embedding_calls: Counter  # outcome: ok | error
    embedding_latency: Histogram
    embedding_texts: Counter
    in_flight: Gauge
    queued: Gauge
    shed: Counter  # reward, reason: deadline | oversize | queue_full
    queued_texts: Gauge
    expected_wait: Gauge
    rate: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry = REGISTRY) -> RewardMetrics:
        r = registry
        return cls(
            requests=Counter(
                "sarl_reward_requests",
                "Reward requests by reward and HTTP status.",
                ["reward", "status"],
                registry=r,
            ),
            latency=Histogram(
                "sarl_reward_request_seconds",
                "Reward request latency, body read to response.",
                ["reward"],
                buckets=_LATENCY_BUCKETS,
                registry=r,
            ),
            errors=Counter(
                "sarl_reward_errors",
                "Reward requests that failed as a whole, by error type.",
                ["reward", "type"],
                registry=r,
            ),
            items=Counter("sarl_reward_items", "Items scored.", ["reward"], registry=r),
            item_errors=Counter(
                "sarl_reward_item_errors",
                "Items answered with a per-item error.",
                ["reward"],
                registry=r,
            ),
            embedding_calls=Counter(
                "sarl_reward_embedding_calls",
                "Embedder calls (one per reward request that has text to embed).",
                ["outcome"],
                registry=r,
            ),
            embedding_latency=Histogram(
                "sarl_reward_embedding_seconds",
                "Embedder call latency.",
                buckets=_LATENCY_BUCKETS,
                registry=r,
            ),
            embedding_texts=Counter(
                "sarl_reward_embedding_texts",
                "Distinct step texts sent to the embedder.",
                registry=r,
            ),
            in_flight=Gauge(
                "sarl_reward_in_flight", "Reward requests being scored now.", registry=r
            ),
            queued=Gauge(
                "sarl_reward_queued", "Reward requests waiting for a scoring slot.", registry=r
            ),
            shed=Counter(
                "sarl_reward_shed",
                "Requests refused with 503 overloaded: expected completion past --deadline-s "
                "(deadline), alone longer than it (oversize), or no slot (queue_full).",
                ["reward", "reason"],
                registry=r,
            ),
            queued_texts=Gauge(
                "sarl_reward_queued_texts",
                "Step texts of admitted requests not embedded yet.",
                registry=r,
            ),
            expected_wait=Gauge(
                "sarl_reward_expected_wait_seconds",
                "Expected seconds to embed the texts of every admitted request.",
                registry=r,
            ),
            rate=Gauge(
                "sarl_reward_texts_per_second",
                "Measured throughput used for admission: step texts of admitted requests "
                "completed per second with any of them under way.",
                registry=r,
            ),
        )


@dataclass(frozen=True)
class EmbeddingMetrics:
    """What the embedding server counts."""

    requests: Counter  # status
    latency: Histogram
    texts: Counter
    shed: Counter  # reason: deadline | oversize
    batch_texts: Histogram
    batch_seconds: Histogram
    padded_tokens: Counter
    queued_texts: Gauge
    queued_tokens: Gauge
    expected_wait: Gauge
    rate: Gauge

    def observe_batch(self, texts: int, padded_tokens: int, seconds: float) -> None:
        """One forward pass of the batcher."""
        self.batch_texts.observe(texts)
        self.batch_seconds.observe(seconds)
        self.padded_tokens.inc(padded_tokens)

    @classmethod
    def create(cls, registry: CollectorRegistry = REGISTRY) -> EmbeddingMetrics:
        return cls(
            requests=Counter(
                "sarl_embedding_requests",
                "Embedding requests by HTTP status.",
                ["status"],
                registry=registry,
            ),
            latency=Histogram(
                "sarl_embedding_request_seconds",
                "Embedding request latency.",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            texts=Counter("sarl_embedding_texts", "Input strings embedded.", registry=registry),
            shed=Counter(
                "sarl_embedding_shed",
                "Requests refused with 503 overloaded: expected completion past --deadline-s "
                "(deadline) or alone longer than it (oversize).",
                ["reason"],
                registry=registry,
            ),
            batch_texts=Histogram(
                "sarl_embedding_batch_texts",
                "Distinct strings per pass of the batcher.",
                buckets=_BATCH_TEXTS_BUCKETS,
                registry=registry,
            ),
            batch_seconds=Histogram(
                "sarl_embedding_batch_seconds",
                "Duration of one pass of the batcher.",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            padded_tokens=Counter(
                "sarl_embedding_padded_tokens",
                "Padded tokens of the batcher's passes (strings x longest string, per pass).",
                registry=registry,
            ),
            queued_texts=Gauge(
                "sarl_embedding_queued_texts",
                "Distinct strings waiting for a forward pass.",
                registry=registry,
            ),
            queued_tokens=Gauge(
                "sarl_embedding_queued_tokens",
                "Tokens of admitted requests not encoded yet.",
                registry=registry,
            ),
            expected_wait=Gauge(
                "sarl_embedding_expected_wait_seconds",
                "Expected seconds to encode every admitted request.",
                registry=registry,
            ),
            rate=Gauge(
                "sarl_embedding_tokens_per_second",
                "Measured throughput used for admission (tokens per second while work waits).",
                registry=registry,
            ),
        )
