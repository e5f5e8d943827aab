"""EMPO's extraction runs in the math-verify workers: timeouts, fallback, the pure normaliser."""

from __future__ import annotations

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines import empo
from sarl.rewards.baselines.empo_extract import normalize_answer
from sarl.rewards.registry import create_reward

# math-verify's parse spends about 14 s on this (its ANTLR parser on 2,000 nested parentheses).
HOSTILE = "\\boxed{" + "(" * 2000 + "1" + ")" * 2000 + "}"


def test_a_runaway_extraction_is_no_answer_and_keeps_the_worker() -> None:
    """The worker's own timer stops the parse at ``timeout_seconds``: that response has no
    answer (as the reference's parse gives nothing past its timeout), is counted in
    ``extraction_timeout``, and the same warm worker extracts the rest."""
    pytest.importorskip("math_verify")
    reward = create_reward("empo", {"timeout_seconds": 1.0})
    assert isinstance(reward, empo.EMPOReward) and reward._pool is not None
    pool = reward._pool
    try:
        reward.score_groups([[Sample("\\boxed{1}")]])  # workers warm
        before, restarts = set(pool.pids()), pool.restarts
        out = reward.score_groups([[Sample(HOSTILE), Sample("\\boxed{3}"), Sample("\\boxed{3}")]])
        assert [o.components["extraction_timeout"] for o in out[0]] == [1.0, 0.0, 0.0]
        assert [o.components["has_answer"] for o in out[0]] == [0.0, 1.0, 1.0]
        assert [o.score for o in out[0]] == [0.0, 2 / 3, 2 / 3]
        assert pool.restarts == restarts and set(pool.pids()) == before
    finally:
        reward.close()


def test_without_math_verify_it_extracts_the_last_box(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(empo, "math_verify_available", lambda: False)
    reward = create_reward("empo")
    assert "boxed_only" in caplog.text
    group = ["The final answer is $3$.", "\\boxed{3}", "\\boxed{3}"]
    out = reward.score_groups([[Sample(r) for r in group]])[0]
    assert [o.score for o in out] == [0.0, 2 / 3, 2 / 3]
    with pytest.raises(ImportError, match="on_missing='error'"):
        create_reward("empo", {"on_missing": "error"})


@pytest.mark.parametrize(
    ("answer", "normalized"),
    [
        ("\\text{five}", "five"),
        ("5\\text{ cm}", "5 cm"),
        ("\\boxed{3}", "3"),
        ("\\boxed{\\text{A}}", "A"),
        ("\\text{a}, \\text{b}", "a, b"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        ("", ""),
    ],
)
def test_normalize_answer_is_the_references_rule(answer: str, normalized: str) -> None:
    """``normalize_prediction`` of the reference: ``\\text{}`` unwrapped, then a ``\\boxed{}``."""
    assert normalize_answer(answer) == normalized
