"""Micro-batching and group collection for rewards called one sample at a time (pure asyncio).

Called by the verl adapter (``compute_score`` and ``SarlRewardManager``): verl 0.9.1's reward loop
scores each response in its own coroutine (``RewardLoopWorker.compute_score_batch`` gathers one
task per sample; during rollout the agent loop sends each finished response on its own), but a
reward is cheapest when it sees many responses at once (one embedding request for all steps).

* :class:`RewardBatcher` coalesces concurrent ``score_group`` calls into one
  ``Reward.ascore_groups`` call: a micro-batch is flushed when it holds ``max_batch_samples``
  samples or ``max_wait_s`` after its first request, whichever comes first.
* :class:`GroupCollector` holds the responses of each group id (verl's ``uid``) until the group
  is complete, then scores the whole group through a batcher: what group rewards need.
* :class:`SharedRewards` (instance :data:`SHARED`) keeps one reward per (name, settings) per
  process (and one weighted sum per list of terms, built from those) and one batcher per event
  loop. It lives here, in a normally imported module, because verl may execute
  ``compute_score.py`` from a file path as a fresh module on every load.

Generic over :class:`sarl.rewards.base.Reward`; no verl import.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sarl.integrations.verl.terms import WeightedRewards
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import create_reward, parse_settings

#: One reward term: (registered name, weight, settings).
TermSpec = tuple[str, float, Mapping[str, Any]]


@dataclass(slots=True)
class _Request:
    group: tuple[Sample, ...]
    future: asyncio.Future[list[RewardOutput]]


class RewardBatcher:
    """Coalesces concurrent scoring requests into one ``reward.ascore_groups`` call per batch.

    Each caller gets its own group's outputs, in its own sample order. When the reward call
    raises (or returns the wrong shape), every caller of *that* micro-batch gets the exception;
    callers in other micro-batches are unaffected. A cancelled caller is dropped from a batch
    that has not started yet. Bound to the event loop of its first call (asyncio futures are).
    """

    def __init__(
        self, reward: Reward, *, max_batch_samples: int = 256, max_wait_s: float = 0.01
    ) -> None:
        if max_batch_samples < 1:
            raise ValueError(f"max_batch_samples: must be >= 1, got {max_batch_samples}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s: must be >= 0, got {max_wait_s}")
        self.reward = reward
        self.max_batch_samples = max_batch_samples
        self.max_wait_s = max_wait_s
        #: Number of ``ascore_groups`` calls made (for tests and diagnostics).
        self.calls = 0
        self._pending: list[_Request] = []
        self._pending_samples = 0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Strong references: the event loop keeps only weak ones to running tasks.
        self._tasks: set[asyncio.Task[None]] = set()

    async def score_group(self, group: Sequence[Sample]) -> list[RewardOutput]:
        """Score one group (all responses to one prompt) as part of the next micro-batch."""
        if not group:
            raise ValueError("group: must hold at least one sample")
        loop = self._bind_loop()
        request = _Request(tuple(group), loop.create_future())
        self._pending.append(request)
        self._pending_samples += len(request.group)
        if self._pending_samples >= self.max_batch_samples:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.max_wait_s, self._flush)
        return await request.future

    async def score_sample(self, sample: Sample) -> RewardOutput:
        """Score one sample as a group of one (per-sample rewards only)."""
        if self.reward.needs_group:
            raise ValueError(f"reward {self.reward.name!r} needs whole groups; use score_group")
        return (await self.score_group([sample]))[0]

    async def drain(self) -> None:
        """Flush the pending micro-batch and wait for every started one to finish."""
        self._flush()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("RewardBatcher: used from a second event loop; make one per loop")
        return loop

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch = [r for r in self._pending if not r.future.done()]
        self._pending = []
        self._pending_samples = 0
        if batch and self._loop is not None:
            task = self._loop.create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[_Request]) -> None:
        self.calls += 1
        try:
            results = await self.reward.ascore_groups([r.group for r in batch])
            _check_shape(self.reward, [len(r.group) for r in batch], results)
        except asyncio.CancelledError:
            for r in batch:
                r.future.cancel()
            raise
        except Exception as e:  # delivered to the callers of this batch, who decide what to do
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(e)
            return
        for r, outputs in zip(batch, results, strict=True):
            if not r.future.done():
                r.future.set_result(list(outputs))


def _check_shape(reward: Reward, sizes: list[int], results: Sequence[Sequence[Any]]) -> None:
    got = [len(g) for g in results]
    if got != sizes:
        raise RuntimeError(
            f"reward {reward.name!r}: ascore_groups returned groups of sizes {got} "
            f"for inputs of sizes {sizes}"
        )


class GroupIncompleteError(RuntimeError):
    """Fewer responses of a group arrived than the group size before the group timed out."""


@dataclass(slots=True)
class _OpenGroup:
    samples: list[Sample] = field(default_factory=list)
    futures: list[asyncio.Future[RewardOutput]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class GroupCollector:
    """Waits for ``group_size`` samples with one group id, then scores them together.

    Every caller awaits its own sample's output. If a group is still incomplete ``timeout_s``
    after its first sample arrived, its callers get :class:`GroupIncompleteError` (a partial group
    would silently change what a group reward means). ``score_timeout_s`` bounds the scoring of a
    complete group (batching window included); its callers then get ``TimeoutError``. A group id
    seen again after its group completed starts a new group.
    """

    def __init__(
        self,
        batcher: RewardBatcher,
        *,
        group_size: int,
        timeout_s: float,
        score_timeout_s: float | None = None,
    ) -> None:
        if group_size < 1:
            raise ValueError(f"group_size: must be >= 1, got {group_size}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0, got {timeout_s}")
        self.batcher = batcher
        self.group_size = group_size
        self.timeout_s = timeout_s
        self.score_timeout_s = score_timeout_s
        self._open: dict[Hashable, _OpenGroup] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def open_groups(self) -> int:
        """Groups still waiting for siblings."""
        return len(self._open)

    async def score(self, group_id: Hashable, sample: Sample) -> RewardOutput:
        """Add ``sample`` to its group and return its output once the whole group is scored."""
        loop = asyncio.get_running_loop()
        group = self._open.get(group_id)
        if group is None:
            group = self._open[group_id] = _OpenGroup()
            group.timer = loop.call_later(self.timeout_s, self._expire, group_id, group)
        future: asyncio.Future[RewardOutput] = loop.create_future()
        group.samples.append(sample)
        group.futures.append(future)
        if len(group.samples) == self.group_size:
            del self._open[group_id]
            if group.timer is not None:
                group.timer.cancel()
            task = loop.create_task(self._score(group_id, group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    def _expire(self, group_id: Hashable, group: _OpenGroup) -> None:
        if self._open.get(group_id) is not group:
            return
        del self._open[group_id]
        _fail(
            group.futures,
            GroupIncompleteError(
                f"group {group_id!r}: {len(group.samples)} of {self.group_size} samples arrived "
                f"within {self.timeout_s:g} s"
            ),
        )

    async def _score(self, group_id: Hashable, group: _OpenGroup) -> None:
        try:
            outputs = await self._timed(group_id, group.samples)
        except asyncio.CancelledError:
            for f in group.futures:
                f.cancel()
            raise
        except Exception as e:  # delivered to every member of the group
            _fail(group.futures, e)
            return
        for f, out in zip(group.futures, outputs, strict=True):
            if not f.done():
                f.set_result(out)

    async def _timed(self, group_id: Hashable, samples: list[Sample]) -> list[RewardOutput]:
        if self.score_timeout_s is None:
            return await self.batcher.score_group(samples)
        try:
            async with asyncio.timeout(self.score_timeout_s) as deadline:
                return await self.batcher.score_group(samples)
        except TimeoutError as e:
            if not deadline.expired():  # the reward's own timeout, not ours
                raise
            message = f"group {group_id!r}: scoring took longer than {self.score_timeout_s:g} s"
            raise TimeoutError(message) from e


def _fail(futures: Sequence[asyncio.Future[RewardOutput]], error: BaseException) -> None:
    for f in futures:
        if not f.done():
            f.set_exception(error)


class SharedRewards:
    """One reward per (name, settings) per process, and one batcher per (reward, event loop).

    Thread-safe: a lock guards both tables, and a reward is built under it so two threads asking
    for the same settings never build two (building may load a model; callers on an event loop
    should call :meth:`reward` through ``asyncio.to_thread``). Batchers are weakly keyed by their
    loop, so a closed, collected loop's batchers go with it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rewards: dict[str, Reward] = {}
        self._batchers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[int, int, float], RewardBatcher]
        ] = weakref.WeakKeyDictionary()

    def cached(self, name: str, settings: Mapping[str, Any]) -> Reward | None:
        """The reward already built for exactly these settings, if any (no validation)."""
        return self._rewards.get(_cache_key(name, settings))

    def reward(self, name: str, settings: Mapping[str, Any]) -> Reward:
        """The process's reward for ``name`` and ``settings``, built on first use."""
        raw_key = _cache_key(name, settings)
        with self._lock:
            found = self._rewards.get(raw_key)
            if found is None:
                validated = parse_settings(name, settings)
                # Equal settings written differently (defaults spelled out) share one reward.
                key = _cache_key(name, validated.model_dump(mode="json"))
                found = self._rewards.get(key) or create_reward(name, validated)
                self._rewards[key] = found
                self._rewards[raw_key] = found
            return found

    def cached_combined(self, terms: Sequence[TermSpec]) -> Reward | None:
        """The weighted sum already built for exactly these terms, if any (no validation)."""
        return self._rewards.get(_terms_key(terms))

    def combined(self, terms: Sequence[TermSpec]) -> Reward:
        """The process's :class:`~sarl.integrations.verl.terms.WeightedRewards` of ``terms``
        (``(name, weight, settings)`` each), built on first use from the shared term rewards."""
        key = _terms_key(terms)
        found = self._rewards.get(key)
        if found is not None:
            return found
        parts = [(self.reward(name, settings), weight) for name, weight, settings in terms]
        with self._lock:  # built outside: self.reward takes the (non-reentrant) lock itself
            found = self._rewards.get(key)
            if found is None:
                found = self._rewards[key] = WeightedRewards(parts)
            return found

    def batcher(
        self, reward: Reward, *, max_batch_samples: int, max_wait_s: float
    ) -> RewardBatcher:
        """The running event loop's batcher for ``reward`` with these batching limits."""
        loop = asyncio.get_running_loop()
        key = (id(reward), max_batch_samples, max_wait_s)
        with self._lock:
            per_loop = self._batchers.setdefault(loop, {})
            found = per_loop.get(key)
            if found is None:
                found = per_loop[key] = RewardBatcher(
                    reward, max_batch_samples=max_batch_samples, max_wait_s=max_wait_s
                )
            return found

    def close(self) -> None:
        """Close and forget every reward (tests; process shutdown)."""
        with self._lock:
            rewards = list({id(r): r for r in self._rewards.values()}.values())
            self._rewards.clear()
            self._batchers = weakref.WeakKeyDictionary()
        for r in rewards:
            r.close()


def _cache_key(name: str, settings: Mapping[str, Any]) -> str:
    return json.dumps([name, settings], sort_keys=True, default=repr)


def _terms_key(terms: Sequence[TermSpec]) -> str:
    # A list of terms never collides with a [name, settings] key (the first item is a list).
    return json.dumps([[list(t) for t in terms]], sort_keys=True, default=repr)


#: The process-wide instance used by ``compute_score`` and ``SarlRewardManager``.
SHARED = SharedRewards()
