"""The embedding batcher (sarl_services.batching) with a fake encoder whose passes are recorded
and held open on demand, so every interleaving below is forced, not timed."""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

import numpy as np
import pytest

from sarl.embedding.base import FloatArray
from sarl_services.admission import Admission, Overloaded, RateEstimator
from sarl_services.batching import Batcher, BatchSettings

_T = TypeVar("_T")
DIM = 4


def vector(text: str) -> FloatArray:
    """A fixed unit vector per text."""
    row = np.random.default_rng(zlib.crc32(text.encode())).normal(size=DIM)
    return (row / np.linalg.norm(row)).astype(np.float32)


class Encoder:
    """Records each pass; while ``hold`` is set, a pass waits until :meth:`release`."""

    def __init__(self, *, hold: bool = False, fail_on: str | None = None) -> None:
        self.passes: list[list[str]] = []
        self._started = threading.Semaphore(0)
        self._open = threading.Event()
        if not hold:
            self._open.set()
        self.fail_on = fail_on

    def __call__(self, texts: list[str]) -> FloatArray:
        self.passes.append(list(texts))
        self._started.release()
        if not self._open.wait(timeout=60):
            raise TimeoutError("the test never released the pass")
        if self.fail_on in texts:
            raise RuntimeError("model crashed")
        return np.stack([vector(t) for t in texts])

    async def pass_started(self) -> None:
        if not await asyncio.to_thread(self._started.acquire, True, 60):
            raise TimeoutError("no pass started")

    def release(self) -> None:
        self._open.set()


def _batcher(
    encoder: Encoder,
    *,
    max_batch_size: int = 128,
    max_batch_tokens: int = 16384,
    batch_wait_s: float = 0.0,
    rate: float = 1e9,
    deadline_s: float = 10.0,
    clock: Clock | None = None,
) -> Batcher:
    admission = Admission(deadline_s, RateEstimator(rate), fair=True, unit="tokens", headroom=1.0)
    settings = BatchSettings(max_batch_size, max_batch_tokens, batch_wait_s)
    if clock is None:
        return Batcher(encoder, admission, settings)
    return Batcher(encoder, admission, settings, clock=clock)


class Clock:
    """A clock the test moves (the batcher's arrival times)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(main: Coroutine[Any, Any, _T]) -> _T:
    """Run a test body with a time limit, so a broken batcher fails instead of hanging."""

    async def limited() -> _T:
        return await asyncio.wait_for(main, 60)

    return asyncio.run(limited())


async def _settle() -> None:
    """Let every ready task run (submits are queued synchronously up to their first await)."""
    for _ in range(5):
        await asyncio.sleep(0)


def _submit(batcher: Batcher, texts: list[str], tokens: int = 5) -> asyncio.Task[FloatArray]:
    return asyncio.create_task(batcher.submit(texts, [tokens] * len(texts)))


def _check_rows(texts: list[str], rows: FloatArray) -> None:
    np.testing.assert_array_equal(rows, np.stack([vector(t) for t in texts]))


async def _gather(*tasks: Awaitable[FloatArray]) -> list[FloatArray]:
    return list(await asyncio.gather(*tasks))


def test_concurrent_requests_share_one_pass() -> None:
    encoder = Encoder(hold=True)

    async def main() -> None:
        batcher = _batcher(encoder)
        first = _submit(batcher, ["a"])
        await encoder.pass_started()  # the model thread is busy with ["a"]
        requests = [[f"{name}{i}" for i in range(3)] for name in "bcd"]
        tasks = [_submit(batcher, texts) for texts in requests]
        await _settle()
        encoder.release()
        _check_rows(["a"], await first)
        for texts, rows in zip(requests, await _gather(*tasks), strict=True):
            _check_rows(texts, rows)
        batcher.close()

    _run(main())
    # One pass per request before batching; now the three waiting requests share the second.
    assert encoder.passes == [["a"], ["b0", "b1", "b2", "c0", "c1", "c2", "d0", "d1", "d2"]]


def test_passes_respect_the_size_and_padded_token_limits() -> None:
    encoder = Encoder()
    texts = [f"t{i}" for i in range(6)] + ["long", "huge"]
    tokens = [5] * 6 + [12, 40]

    async def main() -> None:
        batcher = _batcher(encoder, max_batch_size=4, max_batch_tokens=24)
        _check_rows(texts, await batcher.submit(texts, tokens))
        batcher.close()

    _run(main())
    size = dict(zip(texts, tokens, strict=True))
    assert [len(p) for p in encoder.passes] == [4, 2, 1, 1]
    for texts_of_pass in encoder.passes:
        assert len(texts_of_pass) <= 4
        padded = len(texts_of_pass) * max(size[t] for t in texts_of_pass)
        assert padded <= 24 or len(texts_of_pass) == 1  # a text over the budget goes alone


def test_a_text_pending_for_two_requests_is_encoded_once() -> None:
    encoder = Encoder(hold=True)

    async def main() -> None:
        batcher = _batcher(encoder)
        busy = _submit(batcher, ["busy"])
        await encoder.pass_started()
        a, b = _submit(batcher, ["x", "y"]), _submit(batcher, ["y", "z"])
        await _settle()
        encoder.release()
        rows_a, rows_b, _ = await asyncio.gather(a, b, busy)
        _check_rows(["x", "y"], rows_a)
        _check_rows(["y", "z"], rows_b)
        batcher.close()

    _run(main())
    assert encoder.passes == [["busy"], ["x", "y", "z"]]


#: 40 texts of 5 tokens: 2 s of work at the ordering tests' 100 tokens/s.
HUGE = [f"h{i:02d}" for i in range(40)]


def _ordered_batcher(encoder: Encoder, clock: Clock) -> Batcher:
    """Passes of 8 texts at a rate of 100 tokens/s on ``clock``, so expected finish times
    (arrival + tokens / rate) are whole numbers the ordering tests reason with."""
    return _batcher(encoder, max_batch_size=8, rate=100.0, deadline_s=1000, clock=clock)


def test_a_small_request_is_not_starved_behind_a_huge_one() -> None:
    encoder = Encoder(hold=True)
    huge = HUGE
    clock = Clock()

    async def main() -> None:
        # 5 tokens per text at 100 tokens/s: the huge request is 2 s of work.
        batcher = _ordered_batcher(encoder, clock)
        big = _submit(batcher, huge)
        await encoder.pass_started()  # the first 8 of the huge request
        clock.now = 0.5  # it would finish at 2.0 alone; the small one at 0.6
        small = _submit(batcher, ["s1", "s2"])
        await _settle()
        encoder.release()
        _check_rows(["s1", "s2"], await small)
        _check_rows(huge, await big)
        batcher.close()

    _run(main())
    # The small request goes first in the very next pass, the huge one fills the rest (first
    # come first served would have encoded it after all 40, in the sixth pass).
    assert encoder.passes[1][:2] == ["s1", "s2"]
    assert encoder.passes[1][2:] == huge[8:14]


def test_a_huge_request_that_waited_its_own_work_is_not_overtaken() -> None:
    encoder = Encoder(hold=True)
    huge = HUGE
    clock = Clock()

    async def main() -> None:
        batcher = _ordered_batcher(encoder, clock)
        first = _submit(batcher, ["first"])
        await encoder.pass_started()
        big = _submit(batcher, huge)  # arrives at 0: would finish at 2.0 alone
        await _settle()
        clock.now = 2.5  # small requests keep coming after its own work's time
        smalls = [_submit(batcher, [f"s{i}"]) for i in range(3)]
        await _settle()
        encoder.release()
        await first
        _check_rows(huge, await big)
        for i, task in enumerate(smalls):
            _check_rows([f"s{i}"], await task)
        batcher.close()

    _run(main())
    # Earliest expected finish: 0 + 2 s for the huge request, 2.5 + 0.05 s for each small one.
    assert [t for p in encoder.passes[1:] for t in p] == [*huge, "s0", "s1", "s2"]


def test_equal_requests_are_served_in_arrival_order_each_in_one_pass() -> None:
    encoder = Encoder(hold=True)
    clock = Clock()
    requests = [[f"r{r}t{i}" for i in range(4)] for r in range(4)]

    async def main() -> None:
        batcher = _ordered_batcher(encoder, clock)
        first = _submit(batcher, ["first"])
        await encoder.pass_started()
        tasks = []
        for r, texts in enumerate(requests):
            clock.now = 0.01 * r
            tasks.append(_submit(batcher, texts))
        await _settle()
        encoder.release()
        await first
        for texts, rows in zip(requests, await _gather(*tasks), strict=True):
            _check_rows(texts, rows)
        batcher.close()

    _run(main())
    # Round-robin slices would put 2 texts of each request in each pass, so all four finish
    # with the last pass; here the first two are done after one pass.
    assert encoder.passes[1:] == [requests[0] + requests[1], requests[2] + requests[3]]


def test_a_cancelled_request_has_its_pending_texts_dropped() -> None:
    encoder = Encoder(hold=True)

    async def main() -> None:
        batcher = _batcher(encoder)
        busy = _submit(batcher, ["busy"])
        await encoder.pass_started()
        gone = _submit(batcher, ["a1", "a2", "shared"])
        stays = _submit(batcher, ["shared"])
        await _settle()
        gone.cancel()  # what the route does when the client disconnects
        await _settle()
        assert batcher.pending_texts == 1  # only "shared", which another request waits for
        encoder.release()
        _check_rows(["shared"], await stays)
        await busy
        assert gone.cancelled()
        assert batcher.admission.queued_work == 0
        batcher.close()

    _run(main())
    assert encoder.passes == [["busy"], ["shared"]]


def test_a_failed_pass_fails_its_requests_and_the_batcher_goes_on() -> None:
    encoder = Encoder(hold=True, fail_on="bad")

    async def main() -> None:
        batcher = _batcher(encoder)
        busy = _submit(batcher, ["busy"])
        await encoder.pass_started()
        failing = [_submit(batcher, ["bad", "ok1"]), _submit(batcher, ["ok2"])]  # one pass
        await _settle()
        encoder.release()
        await busy
        for task in failing:
            with pytest.raises(RuntimeError, match="model crashed"):
                await task
        _check_rows(["ok3"], await _submit(batcher, ["ok3"]))
        assert batcher.admission.queued_work == 0
        batcher.close()

    _run(main())


def test_an_idle_worker_waits_for_more_work_when_the_queue_is_short() -> None:
    encoder = Encoder()

    async def main() -> None:
        # A long wait: the pass starts only because the second request fills it.
        batcher = _batcher(encoder, max_batch_size=2, batch_wait_s=10.0)
        first = _submit(batcher, ["a"])
        await _settle()  # the worker has seen "a" alone and is waiting for more
        second = _submit(batcher, ["b"])
        await asyncio.gather(first, second)
        batcher.close()

    _run(main())
    assert encoder.passes == [["a", "b"]]


def test_the_wait_for_more_work_is_bounded() -> None:
    encoder = Encoder()

    async def main() -> None:
        batcher = _batcher(encoder, max_batch_size=64, batch_wait_s=0.01)
        _check_rows(["alone"], await _submit(batcher, ["alone"]))  # the queue never fills
        batcher.close()

    _run(main())


def test_a_refused_request_queues_nothing() -> None:
    encoder = Encoder(hold=True)

    async def main() -> None:
        # 10 tokens/s, deadline 1 s: one request of 8 tokens fits, a second of 8 does not.
        batcher = _batcher(encoder, rate=10.0, deadline_s=1.0)
        first = _submit(batcher, ["a", "b"], tokens=4)
        await encoder.pass_started()
        with pytest.raises(Overloaded) as refused:
            await batcher.submit(["c", "d"], [4, 4])
        assert refused.value.reason == "deadline"
        assert batcher.pending_texts == 0
        again = _submit(batcher, ["a"], tokens=4)  # already being encoded: no new work
        await _settle()
        encoder.release()
        await asyncio.gather(first, again)
        batcher.close()

    _run(main())
    assert encoder.passes == [["a", "b"]]


@pytest.mark.parametrize("texts", [[], ["a", "b", "a"]])
def test_submit_takes_distinct_texts_only(texts: list[str]) -> None:
    async def main() -> None:
        batcher = _batcher(Encoder())
        with pytest.raises(ValueError, match="each text once"):
            await batcher.submit(texts, [1] * len(texts))
        batcher.close()

    _run(main())
