"""Dynamic batching for the embedding service: concurrent requests share forward passes.

Called by :class:`sarl_services.embedding.EmbeddingModel`: each ``/v1/embeddings`` (or V1
``:predict``) request submits its distinct texts and their token counts with
:meth:`Batcher.submit`, which admits the request by its work (:mod:`sarl_services.admission`,
fair sharing, work in tokens) or raises :class:`~sarl_services.admission.Overloaded` before
anything is queued.

* **One model worker.** A sentence-transformers model is not safe to call concurrently, and on
  CPU one forward pass already has every core (:mod:`sarl_services.threads`), so one thread runs
  every forward pass; the queue and all bookkeeping live on the event loop.
* **Coalescing and de-duplication.** The pending texts of all requests form one queue; a text
  already pending or being encoded for another request is encoded once and answered to both. A
  pass takes up to ``max_batch_size`` texts and ``max_batch_tokens`` *padded* tokens (texts x
  longest text: a bound on what the pass computes and holds in memory; how the encode function
  splits a pass into forward calls is its own business). When less than a full pass is pending
  and the worker is idle, it waits up to ``batch_wait_s`` (counted from when the queue became
  non-empty) for more, so requests arriving together share a pass.
* **Order: earliest expected finish first.** A pass is filled request by request in the order
  of ``arrival + remaining work / rate`` (the measured rate, ties by arrival): when the request
  would finish if it had the model to itself. Equal requests are served first come first served,
  each in as few passes as possible (round-robin slices, the previous policy, made 16 equal
  clients' requests all finish near the end of the work: p99 2.9 s where this order gives the
  mean); a small request arriving behind a huge one goes first, in the next pass; a huge request
  is not starved by a stream of small ones: once it has waited longer than its own work takes,
  every newcomer's key is later than its own. Within a request, shortest texts first, so
  consecutive passes over one big request hold texts of similar length.
* **Disconnects.** When a request is cancelled (its client has gone,
  :mod:`sarl_services.disconnect`), its texts still pending are dropped unless another request
  waits for them; a pass already running finishes (a thread cannot be interrupted).
* **Payloads.** Each text may carry a payload (the embedding service's token ids, so texts are
  tokenized once); ``encode`` receives the pass's payloads, or its texts when none were given.
* **Results** are the rows ``encode`` returns for the pass; a BERT-style model masks padding, so
  a text's vector does not depend on its batch neighbours beyond float rounding (~1e-7).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from sarl.embedding.base import FloatArray
from sarl_services.admission import Admission, Ticket

_LOG = logging.getLogger(__name__)

#: Blocking: unit-norm ``(len(items), dim)`` rows for one pass's payloads (or texts).
EncodeFn = Callable[[list[Any]], FloatArray]
#: Called after each pass with (texts, padded tokens, seconds).
BatchObserver = Callable[[int, int, float], None]


@dataclass(frozen=True)
class BatchSettings:
    """Limits of one forward pass (``--max-batch-size``, ``--max-batch-tokens``,
    ``--batch-wait-ms``)."""

    max_batch_size: int = 128
    max_batch_tokens: int = 16384  # padded: texts x longest; 64 texts of 256 tokens
    batch_wait_s: float = 0.005

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"--max-batch-size: must be >= 1, got {self.max_batch_size}")
        if self.max_batch_tokens < 1:
            raise ValueError(f"--max-batch-tokens: must be >= 1, got {self.max_batch_tokens}")
        if not 0 <= self.batch_wait_s <= 10:
            ms = self.batch_wait_s * 1000
            raise ValueError(f"--batch-wait-ms: must be between 0 and 10000, got {ms:g}")


class _State(enum.Enum):
    PENDING = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()
    DROPPED = enum.auto()


@dataclass(eq=False)
class _Entry:
    """One distinct text in the queue; ``owner`` is the request whose ticket carries its work."""

    text: str
    tokens: int
    payload: Any  # what encode receives for this text
    owner: _Job | None
    subscribers: set[_Job] = field(default_factory=set)
    state: _State = _State.PENDING
    vector: FloatArray | None = None  # (dim,) once DONE


@dataclass(eq=False)
class _Job:
    """One submitted request: its entries in input order, those it may still schedule, how many
    are not done, the future its ``submit`` call awaits, and when it arrived."""

    entries: list[_Entry]
    pending: deque[_Entry]
    waiting: int
    ticket: Ticket
    future: asyncio.Future[None]
    arrived: float = 0.0

    def pending_tokens(self) -> int:
        """Tokens of the entries this job may still schedule."""
        return sum(e.tokens for e in self.pending if e.state is _State.PENDING)

    def next_pending(self) -> _Entry | None:
        """The next entry this job may schedule (ones taken or dropped meanwhile are skipped)."""
        while self.pending and self.pending[0].state is not _State.PENDING:
            self.pending.popleft()
        return self.pending[0] if self.pending else None


class Batcher:
    """The queue and the model worker; create it anywhere, use it on one event loop."""

    def __init__(
        self,
        encode: EncodeFn,
        admission: Admission,
        settings: BatchSettings | None = None,
        *,
        on_batch: BatchObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._encode = encode
        self._clock = clock
        self.admission = admission
        self.settings = settings or BatchSettings()
        self._on_batch = on_batch
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode")
        self._entries: dict[str, _Entry] = {}  # pending or running, by text
        self._jobs: dict[_Job, None] = {}  # in arrival order (an ordered set)
        self._pending_texts = 0
        self._pending_tokens = 0
        self._pending_since = 0.0
        self._backlog_since: float | None = None  # end of the last pass, if work was waiting
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def pending_texts(self) -> int:
        """Texts queued for a forward pass (not yet running)."""
        return self._pending_texts

    async def submit(
        self, texts: list[str], tokens: list[int], payloads: list[Any] | None = None
    ) -> FloatArray:
        """Unit-norm ``(len(texts), dim)`` rows for distinct ``texts`` (with their token counts,
        and what ``encode`` receives for each: ``payloads``, default the texts). Raises
        :class:`~sarl_services.admission.Overloaded` before queueing anything when the request
        is not admitted; cancelling the call drops its pending texts."""
        if not texts or len(set(texts)) != len(texts):
            raise ValueError("submit() needs at least one text, each text once")
        if payloads is not None and len(payloads) != len(texts):
            raise ValueError("submit() needs one payload per text")
        work = sum(n for t, n in zip(texts, tokens, strict=True) if t not in self._entries)
        ticket = self.admission.admit(work)  # raises when refused: nothing queued yet
        job = self._enqueue(texts, tokens, texts if payloads is None else payloads, ticket)
        self._ensure_running()
        try:
            await job.future
        finally:
            self._forget(job)
        return np.stack([cast(FloatArray, e.vector) for e in job.entries])  # (texts, dim)

    def close(self) -> None:
        """Stop the worker loop (tests); a pass already running finishes on its thread."""
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- queue bookkeeping (event loop only) -------------------------------------------------

    def _enqueue(
        self, texts: list[str], tokens: list[int], payloads: list[Any], ticket: Ticket
    ) -> _Job:
        loop = asyncio.get_running_loop()
        job = _Job([], deque(), 0, ticket, loop.create_future(), arrived=self._clock())
        if self._pending_texts == 0:
            self._pending_since = time.monotonic()
        for text, count, payload in zip(texts, tokens, payloads, strict=True):
            entry = self._entries.get(text)
            if entry is None:  # new work, carried by this job's ticket
                entry = self._entries[text] = _Entry(text, count, payload, owner=job)
                self._pending_texts += 1
                self._pending_tokens += count
            entry.subscribers.add(job)
            job.entries.append(entry)
            if entry.state is _State.PENDING:
                job.pending.append(entry)
        # Shortest first within a request: consecutive passes over one big request then hold
        # texts of similar length, so less of each pass is padding.
        job.pending = deque(sorted(job.pending, key=lambda e: e.tokens))
        job.waiting = len(job.entries)
        self._jobs[job] = None
        self._wake.set()
        return job

    def _forget(self, job: _Job) -> None:
        """The job is done, failed or cancelled: drop its claim on every entry."""
        self._jobs.pop(job, None)
        self.admission.release(job.ticket)
        for entry in job.entries:
            entry.subscribers.discard(job)
            if entry.state in (_State.DONE, _State.DROPPED):
                continue
            if entry.owner is job:  # its remaining work moves to a request still waiting
                entry.owner = next(iter(entry.subscribers), None)
                if entry.owner is not None:
                    entry.owner.ticket.work += entry.tokens
            if entry.state is _State.PENDING and not entry.subscribers:
                entry.state = _State.DROPPED  # nobody waits for it: never encoded
                del self._entries[entry.text]
                self._pending_texts -= 1
                self._pending_tokens -= entry.tokens

    def _queue_is_short(self) -> bool:
        s = self.settings
        return self._pending_texts < s.max_batch_size and self._pending_tokens < s.max_batch_tokens

    def _take_batch(self) -> list[_Entry]:
        """Up to a full pass of pending entries, earliest expected finish first (module doc)."""
        s = self.settings
        rate = max(self.admission.rate.per_s, 1e-9)  # tokens per second
        jobs = [
            (job.arrived + job.pending_tokens() / rate, order, job)
            for order, job in enumerate(self._jobs)
            if job.next_pending() is not None
        ]
        jobs.sort(key=lambda item: item[:2])
        batch: list[_Entry] = []
        longest = 0
        for _, _, job in jobs:
            while (entry := job.next_pending()) is not None:
                size, widest = len(batch) + 1, max(longest, entry.tokens)
                if batch and (size > s.max_batch_size or size * widest > s.max_batch_tokens):
                    break
                job.pending.popleft()
                entry.state = _State.RUNNING
                batch.append(entry)
                longest = widest
            else:
                continue  # this job has nothing left to schedule: the next one
            break  # the pass is full
        self._pending_texts -= len(batch)
        self._pending_tokens -= sum(e.tokens for e in batch)
        return batch

    def _finish(
        self, batch: list[_Entry], vectors: FloatArray | None, error: Exception | None
    ) -> None:
        """Hand a pass's rows (or its error) to every job waiting for them."""
        for i, entry in enumerate(batch):
            if self._entries.get(entry.text) is entry:
                del self._entries[entry.text]
            entry.state = _State.DONE
            if vectors is not None:
                entry.vector = vectors[i]  # (dim,)
            owner = entry.owner
            if owner is not None:
                owner.ticket.work = max(0.0, owner.ticket.work - entry.tokens)
            for job in list(entry.subscribers):
                if job.future.done():
                    continue
                if error is not None:
                    job.future.set_exception(error)
                    continue
                job.waiting -= 1
                if job.waiting == 0:
                    job.future.set_result(None)

    # -- the worker loop ---------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="batcher")

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending_texts:
                await self._gather()
                batch = self._take_batch()
                if batch:
                    await self._encode_batch(batch)

    async def _gather(self) -> None:
        """While less than a full pass is pending, wait for more, up to ``batch_wait_s`` after
        the queue became non-empty."""
        until = self._pending_since + self.settings.batch_wait_s
        while self._pending_texts and self._queue_is_short():
            left = until - time.monotonic()
            if left <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    async def _encode_batch(self, batch: list[_Entry]) -> None:
        items = [e.payload for e in batch]
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        # The rate counts wall time while work waits, not only the pass itself: with a backlog,
        # from the end of the previous pass, so the event loop's share (answering requests,
        # filling the next batch) is part of the service rate the admission plans with.
        busy_since = start if self._backlog_since is None else self._backlog_since
        try:
            vectors = await loop.run_in_executor(self._executor, self._encode, items)
        except Exception as e:  # the model failed: every request waiting on this pass fails
            _LOG.exception("forward pass of %d texts failed", len(items))
            self._backlog_since = None
            self._finish(batch, None, e)
            return
        end = time.perf_counter()
        self.admission.rate.observe(sum(e.tokens for e in batch), end - busy_since)
        self._backlog_since = end if self._pending_texts else None
        if self._on_batch is not None:
            self._on_batch(len(batch), len(batch) * max(e.tokens for e in batch), end - start)
        self._finish(batch, vectors, None)
