"""Bounded concurrency with a bounded queue, for the reward service's scoring path.

Called by :mod:`sarl_services.reward` around each request's scoring. At most
``max_concurrency`` requests are scored at once; up to ``max_queue`` more wait their turn in
arrival order; beyond that a request is refused at once with 503 and ``Retry-After``. This caps
how many requests are held in memory; how *long* they wait is bounded by the work-based
admission before it (:mod:`sarl_services.admission`).

Why 503 and not 429: 429 tells one client that *it* sends too much, while here the server as a
whole is saturated, whoever sends. 503 + Retry-After is what KServe/Knative's queue-proxy and
Envoy return for the same condition, and what the sdk's embedding client and common HTTP retry
policies already retry with back-off; the body's ``type`` is ``"overloaded"`` (``"not_ready"``
while loading) so clients can tell the two 503s apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sarl_services.admission import Overloaded


class ConcurrencyLimiter:
    """An asyncio semaphore plus a cap on waiters; create and use it on one event loop."""

    def __init__(self, max_concurrency: int, max_queue: int, *, retry_after_s: int = 1) -> None:
        if max_concurrency < 1:
            raise ValueError(f"--max-concurrency: must be >= 1, got {max_concurrency}")
        if max_queue < 0:
            raise ValueError(f"--max-queue: must be >= 0, got {max_queue}")
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self._retry_after_s = retry_after_s
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._admitted = 0  # running + waiting
        self._running = 0

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._admitted - self._running

    def ensure_room(self) -> None:
        """:class:`Overloaded` now if :meth:`slot` would refuse (to refuse before other work)."""
        if self._admitted >= self.max_concurrency + self.max_queue:
            raise Overloaded(
                f"overloaded: {self._running} requests scoring and {self.waiting} waiting "
                f"(--max-concurrency {self.max_concurrency}, --max-queue {self.max_queue}); "
                "retry later",
                retry_after_s=self._retry_after_s,
                reason="queue_full",
            )

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a scoring slot for the ``async with`` body; :class:`Overloaded` when full."""
        self.ensure_room()
        self._admitted += 1
        try:
            async with self._semaphore:
                self._running += 1
                try:
                    yield
                finally:
                    self._running -= 1
        finally:
            self._admitted -= 1
