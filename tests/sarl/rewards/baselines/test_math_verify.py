"""``ground_truth_math_verify``: math-verify in worker subprocesses with our own time bound."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines import math_verify as mv
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


def sleepy_pool(workers: int = 1, timeout: float = 0.5) -> mv.BoundedProcessPool:
    return mv.BoundedProcessPool(workers, timeout, 30.0, command=[sys.executable, "-c", SLEEPY])


def test_registered_with_ground_truth_settings() -> None:
    assert get_reward_class("ground_truth_math_verify") is mv.MathVerifyReward
    with pytest.raises(RewardConfigError, match="timeout_seconds"):
        create_reward("ground_truth_math_verify", {"timeout_seconds": 0})
    with pytest.raises(RewardConfigError, match="correct_scor"):
        create_reward("ground_truth_math_verify", {"correct_scor": 2})


def test_a_call_past_the_deadline_times_out_and_its_worker_is_replaced() -> None:
    pool = sleepy_pool()
    try:
        assert pool.map([("0.01", ""), ("5", ""), ("0.01", "")]) == [1, mv.TIMED_OUT, 1]
        assert (pool.timeouts, pool.restarts) == (1, 1)
    finally:
        pool.close()


def test_a_dead_worker_counts_as_timed_out_without_waiting() -> None:
    pool = sleepy_pool(timeout=10.0)
    try:
        assert pool.map([("-1", ""), ("0", "")]) == [mv.TIMED_OUT, 1]
        assert pool.restarts == 1
    finally:
        pool.close()


def test_a_starting_worker_gets_the_startup_grace() -> None:
    pool = sleepy_pool(timeout=0.1)  # grace 30 s: the first answer may take longer than 0.1 s
    try:
        assert pool.map([("0.5", "")]) == [1]
        assert pool.map([("0.5", "")]) == [mv.TIMED_OUT]  # ready now: no grace
    finally:
        pool.close()


def test_workers_run_in_parallel_within_one_deadline() -> None:
    pool = sleepy_pool(workers=3, timeout=0.8)
    try:
        pool.map([("0", "")] * 3)  # all three started and ready
        assert pool.map([("0.4", "")] * 3) == [1, 1, 1]  # 3 x 0.4 s in parallel: within 0.8 s
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
    reward = create_reward("ground_truth_math_verify")
    assert isinstance(reward, mv.MathVerifyReward)
    if reward._pool is None:
        pytest.skip("math-verify is not installed")
    reward._pool.close()
    reward._pool = sleepy_pool(timeout=0.3)  # every comparison "hangs" past the bound
    assert reward._pool.map([("0", "")]) == [1]  # started: the startup grace is used up
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
