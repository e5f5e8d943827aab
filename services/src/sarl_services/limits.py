"""Bounded concurrency with a bounded queue, for the reward service's scoring path.

Called by :mod:`sarl_services.reward` around each request's scoring. At most
``max_concurrency`` requests are scored at once; up to ``max_queue`` more wait their turn in
arrival order; beyond that a request is refused at once with 503 and ``Retry-After``. This caps
how many requests are held in memory; how *long* they wait is bounded by the work-based
admission before it (:mod:`sarl_services.admission`).

:class:`BodyBudget`, used by both services' body reader, bounds the bytes of request bodies
being received and decoded at once, before a byte of a body is read.

Why 503 and not 429: 429 tells one client that *it* sends too much, while here the server as a
whole is saturated, whoever sends. 503 + Retry-After is what KServe/Knative's queue-proxy and
Envoy return for the same condition, and what the sdk's embedding client and common HTTP retry
policies already retry with back-off; the body's ``type`` is ``"overloaded"`` (``"not_ready"``
while loading) so clients can tell the two 503s apart.
"""

from __future__ import annotations

import asyncio
from collections import deque
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


class BodyBudget:
    """Bytes that request bodies being received and decoded may take together, process-wide.

    Used by :class:`sarl_services.body.BodyReader`: a body's bytes are reserved before they are
    read (its ``Content-Length``, or chunk by chunk), and the memory decoding it will take
    before it is decoded; all is given back once the body is decoded. A reservation that does
    not fit waits in arrival order for up to ``wait_s``, then :class:`Overloaded` (503 +
    Retry-After, reason ``body_memory``): so any number of clients sending bodies at once
    cannot make the service hold more than ``capacity`` bytes of them. Create and use it on
    one event loop.
    """

    def __init__(self, capacity: int, *, wait_s: float = 2.0, retry_after_s: int = 1) -> None:
        if capacity < 1:
            raise ValueError(f"body budget: must be >= 1 byte, got {capacity}")
        self.capacity = capacity
        self._wait_s = wait_s
        self._retry_after_s = retry_after_s
        self._used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def used(self) -> int:
        return self._used

    async def acquire(self, size: int) -> None:
        """Reserve ``size`` bytes (at most ``capacity``); :class:`Overloaded` when they do not
        fit within ``wait_s``. Pair with :meth:`release`."""
        if size > self.capacity:
            raise self._overloaded(size)
        if not self._waiters and self._used + size <= self.capacity:
            self._used += size
            return
        waiter = (size, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter[1], self._wait_s)
        except BaseException as e:
            if waiter[1].done() and not waiter[1].cancelled():
                self.release(size)  # granted just as the wait ended: give it back
            else:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                self._grant()  # the waiters behind this one may fit now
            if isinstance(e, TimeoutError):
                raise self._overloaded(size) from e
            raise

    def release(self, size: int) -> None:
        self._used -= size
        self._grant()

    def _grant(self) -> None:
        # First come first served: a large body at the head is not overtaken by small ones.
        while self._waiters:
            size, future = self._waiters[0]
            if future.done():  # given up
                self._waiters.popleft()
                continue
            if self._used + size > self.capacity:
                return
            self._waiters.popleft()
            self._used += size
            future.set_result(None)

    def _overloaded(self, size: int) -> Overloaded:
        return Overloaded(
            f"overloaded: request bodies being read and decoded hold {self._used} of "
            f"{self.capacity} bytes and this one needs {size} more; retry later",
            retry_after_s=self._retry_after_s,
            reason="body_memory",
        )
