"""``ground_truth_math_verify``: math-verify in worker subprocesses with our own time bound."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines import math_verify as mv
from sarl.rewards.baselines import math_verify_pool as mvp
from sarl.rewards.registry import RewardConfigError, create_reward, get_reward_class

# A stand-in worker speaking the protocol: sleeps for the "prediction" seconds, then answers 1
# (CORRECT); exits (dies) when asked to sleep a negative time.
SLEEPY = (
    "import json, sys, time\n"
    "print('\"ready\"', flush=True)\n"
    "for line in sys.stdin:\n"
    "    seconds = float(json.loads(line)[0])\n"
    "    if seconds < 0:\n"
    "        sys.exit(1)\n"
    "    time.sleep(seconds)\n"
    "    print(1, flush=True)\n"
)


# The same, but answering with its process id, and taking a second to start.
PID_WORKER = SLEEPY.replace("print(1,", "print(os.getpid(),").replace(
    "import json, sys, time\n", "import json, os, sys, time\ntime.sleep(1)\n"
)
# Runs math-verify for minutes (SymPy evaluating a tower of powers) unless interrupted.
HOSTILE = "\\boxed{2^{2^{2^{2^{2^{2}}}}}}"


def sleepy_pool(
    workers: int = 1, timeout: float = 0.5, script: str = SLEEPY
) -> mvp.BoundedProcessPool:
    # The stand-in has no timer of its own: the pool's kill at the timeout is what stops it.
    return mvp.BoundedProcessPool(
        workers, timeout, 30.0, command=[sys.executable, "-c", script], kill_margin_seconds=0.0
    )


def test_registered_with_ground_truth_settings() -> None:
    assert get_reward_class("ground_truth_math_verify") is mv.MathVerifyReward
    with pytest.raises(RewardConfigError, match="timeout_seconds"):
        create_reward("ground_truth_math_verify", {"timeout_seconds": 0})
    with pytest.raises(RewardConfigError, match="correct_scor"):
        create_reward("ground_truth_math_verify", {"correct_scor": 2})


def test_a_call_past_the_deadline_times_out_and_its_worker_is_replaced() -> None:
    # Bounds with seconds of slack: a loaded CI machine can stall a pipe round-trip for 0.3 s.
    pool = sleepy_pool(timeout=3.0)
    try:
        assert pool.map([("0.01", ""), ("30", ""), ("0.01", "")]) == [1, mvp.TIMED_OUT, 1]
        assert (pool.timeouts, pool.restarts) == (1, 1)
    finally:
        pool.close()


def test_a_dead_worker_counts_as_timed_out_without_waiting() -> None:
    pool = sleepy_pool(timeout=10.0)
    try:
        assert pool.map([("-1", ""), ("0", "")]) == [mvp.TIMED_OUT, 1]
        assert pool.restarts == 1
    finally:
        pool.close()


def test_start_up_is_not_charged_to_a_call() -> None:
    slow_start = PID_WORKER.replace("time.sleep(1)", "time.sleep(3)")  # 3 s to say "ready"
    pool = sleepy_pool(timeout=2.0, script=slow_start)
    try:
        assert pool.map([("0.1", "")]) != [mvp.TIMED_OUT]  # its 2 s start once it is ready
        assert pool.map([("30", "")]) == [mvp.TIMED_OUT]
    finally:
        pool.close()


def test_a_timed_out_call_is_replaced_by_a_spare_already_running() -> None:
    """The worker after a timeout is the spare started before it, not a new one to wait for
    (the old pool started the replacement on the next call and granted it the start-up grace
    again, so a hostile item cost timeout + 60 s)."""
    pool = sleepy_pool(timeout=3.0, script=PID_WORKER)
    try:
        [first] = pool.map([("0", "")])
        spare = set(pool.pids()) - {first}
        assert len(spare) == 1  # started with the first worker
        assert pool.map([("30", "")]) == [mvp.TIMED_OUT]
        assert pool.map([("0", "")]) == list(spare)
        assert first not in pool.pids() and len(pool.pids()) == 2  # killed; a new spare
    finally:
        pool.close()


def test_concurrent_maps_share_the_warm_workers() -> None:
    pool = sleepy_pool(timeout=5.0, script=PID_WORKER)
    try:
        answers: list[int | mvp.TimedOut] = []
        threads = [
            threading.Thread(target=lambda: answers.extend(pool.map([("0.1", "")] * 2)))
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(answers) == 6 and len(set(answers)) == 1  # one worker served all six
    finally:
        pool.close()
    assert mvp.shared_pool(1, 60.0) is mvp.shared_pool(1, 60.0)


def test_cancel_kills_the_worker_of_a_running_call() -> None:
    pool = sleepy_pool(timeout=600.0, script=PID_WORKER)
    cancel = threading.Event()
    try:
        [worker] = pool.map([("0", "")])
        answers: list[int | mvp.TimedOut] = []
        thread = threading.Thread(
            target=lambda: answers.extend(pool.map([("600", "")] * 3, cancel=cancel))
        )
        thread.start()
        _wait_for(lambda: worker not in pool.pids())  # idle workers are listed, busy ones not
        cancel.set()
        thread.join(60)
        assert not thread.is_alive() and answers == [mvp.TIMED_OUT] * 3
        assert not _alive(worker)  # killed, not left to sleep for 600 s
        assert pool.timeouts == 0  # cancelled calls are not timeouts
    finally:
        pool.close()


def _wait_for(condition: Callable[[], bool], limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s  # a bound against hanging, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_run_in_parallel_within_one_deadline() -> None:
    pool = sleepy_pool(workers=3, timeout=3.0)
    try:
        pool.map([("0", "")] * 3)  # all three started and ready
        assert pool.map([("2", "")] * 3) == [1, 1, 1]  # 3 x 2 s in parallel: within 3 s
    finally:
        pool.close()


def test_falls_back_to_answers_equal_without_math_verify(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mv, "math_verify_available", lambda: False)
    reward = create_reward("ground_truth_math_verify")
    assert "falls back" in caplog.text
    out = reward.score_samples(
        [Sample("\\boxed{0.5}", ground_truth="1/2"), Sample("\\boxed{x}", ground_truth="y")]
    )
    assert [o.score for o in out] == [1.0, 0.0]
    assert {o.components["math_verify"] for o in out} == {0.0}
    with pytest.raises(RewardConfigError, match="on_missing"):
        create_reward("ground_truth_math_verify", {"on_missing": "never"})
    with pytest.raises(ImportError, match="not installed"):
        create_reward("ground_truth_math_verify", {"on_missing": "error"})


def test_a_timed_out_comparison_falls_back_and_is_counted() -> None:
    reward = create_reward("ground_truth_math_verify", {"timeout_seconds": 0.3})
    assert isinstance(reward, mv.MathVerifyReward)
    if reward._pool is None:
        pytest.skip("math-verify is not installed")
    reward._pool = sleepy_pool(timeout=0.3)  # every comparison "hangs" past the bound
    out = reward.score_samples([Sample("\\boxed{5}", ground_truth="5")])[0]  # sleeps 5 s
    assert out.score == 1.0  # answers_equal decided
    assert out.components["verifier_timeout"] == 1.0 and out.components["math_verify"] == 0.0
    assert reward.stats().timeouts == 1
    reward.close()


@pytest.fixture(scope="module")
def real() -> Iterator[mv.MathVerifyReward]:
    pytest.importorskip("math_verify")
    reward = create_reward("ground_truth_math_verify", {"workers": 2})
    assert isinstance(reward, mv.MathVerifyReward)
    yield reward
    reward.close()


CASES = [
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{(x-1)(x+1)}", "x^2-1", 1.0),
    ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}", 1.0),
    ("we get \\boxed{4}", "The answer is \\boxed{3}.", 0.0),  # the truth's box is used
    ("\\boxed{\\text{blue}}", "blue", 1.0),
]


def test_math_verify_decides_equivalence(real: mv.MathVerifyReward) -> None:
    samples = [Sample(r, ground_truth=t) for r, t, _ in CASES] + [
        Sample("no box", ground_truth="3")
    ]
    out = real.score_samples(samples)
    assert [o.score for o in out] == [s for _, _, s in CASES] + [0.0]
    assert [o.components["math_verify"] for o in out] == [1.0] * len(CASES) + [0.0]
    assert out[-1].components["has_answer"] == 0.0


def test_safe_from_a_worker_thread(real: mv.MathVerifyReward) -> None:
    # math-verify's own signal.alarm timeout raises off the main thread; ours does not use it.
    results: list[float] = []
    thread = threading.Thread(
        target=lambda: results.extend(
            o.score for o in real.score_samples([Sample("\\boxed{2/4}", ground_truth="0.5")])
        )
    )
    thread.start()
    thread.join(60)
    assert results == [1.0]


def test_missing_ground_truth_is_an_error(real: mv.MathVerifyReward) -> None:
    with pytest.raises(ValueError, match="no ground truth"):
        real.score_samples([Sample("\\boxed{1}")])


def test_numbers_past_the_digit_limit_do_not_raise(real: mv.MathVerifyReward) -> None:
    """math-verify cannot parse a 4,400-digit answer, and the answers_equal fallback used to
    raise on it (Python's int-string limit; issue 12)."""
    huge = "1" + "0" * 4400
    out = real.score_samples(
        [
            Sample(f"\\boxed{{{huge}}}", ground_truth="1"),
            Sample(f"\\boxed{{{huge}}}", ground_truth=huge),
        ]
    )
    assert [o.score for o in out] == [0.0, 1.0]


def test_a_hostile_comparison_costs_its_timeout_and_keeps_the_worker() -> None:
    """The worker's own timer (math-verify's mechanism, ``math_verify/utils.py`` of math-verify
    0.9.0, raising a BaseException that ``math_verify/grader.py``'s ``except Exception`` blocks
    let through) stops the runaway comparison: the next one is answered by the same warm
    worker, and math-verify still decides it."""
    pytest.importorskip("math_verify")
    reward = create_reward("ground_truth_math_verify", {"timeout_seconds": 0.5})
    assert isinstance(reward, mv.MathVerifyReward) and reward._pool is not None
    try:
        reward.score_samples([Sample("\\boxed{1}", ground_truth="1")])  # workers warm
        before = set(reward._pool.pids())
        restarts = reward._pool.restarts
        out = reward.score_samples(
            [Sample(HOSTILE, ground_truth="3"), Sample("\\boxed{0.5}", ground_truth="1/2")]
        )
        assert [o.components["verifier_timeout"] for o in out] == [1.0, 0.0]
        assert out[1].components["math_verify"] == 1.0 and out[1].score == 1.0
        assert reward._pool.restarts == restarts and set(reward._pool.pids()) == before
        assert reward.stats().timeouts == 1
    finally:
        reward.close()


def test_closing_a_reward_stops_its_running_comparison() -> None:
    """What the reward service does when a request's client leaves: the worker running the
    request's comparison is killed (not left to spin for its timeout), a spare takes its
    place, and the next reward of the process scores on the shared pool."""
    pytest.importorskip("math_verify")
    reward = create_reward("ground_truth_math_verify", {"timeout_seconds": 600.0})
    assert isinstance(reward, mv.MathVerifyReward) and reward._pool is not None
    pool = reward._pool
    reward.score_samples([Sample("\\boxed{1}", ground_truth="1")])  # a worker and a spare
    idle = set(pool.pids())
    thread = threading.Thread(
        target=reward.score_samples, args=([Sample(HOSTILE, ground_truth="3")],)
    )
    thread.start()
    _wait_for(lambda: set(pool.pids()) != idle)  # its worker is checked out
    [busy] = idle - set(pool.pids())
    reward.close()
    thread.join(60)
    assert not thread.is_alive() and not _alive(busy)
    again = create_reward("ground_truth_math_verify")
    try:
        [out] = again.score_samples([Sample("\\boxed{2/4}", ground_truth="0.5")])
        assert out.components["math_verify"] == 1.0
    finally:
        again.close()
