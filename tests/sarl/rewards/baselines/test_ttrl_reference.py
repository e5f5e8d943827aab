"""TTRL's defaults give the reference's rewards: PRIME-RL/TTRL's ``test_time_train_metrics``.

``fixtures/ttrl_reference.json`` holds inputs and outputs only: 103 groups (23 hand-made, then 5
random groups for each G = 1..16 drawn from a pool of answer forms) and the rewards and
``majority_ratio`` that ``test_time_train_metrics(task="math")`` of PRIME-RL/TTRL at 3e2cc93
(verl/verl/utils/reward_score/ttrl/ttt_metrics.py, with its qwen_math_parser and math_grade) gave
when run unchanged in a scratch environment (sympy 1.14.0, pylatexenc 2.11, word2number 1.1).
The hand-derived cases below follow the reference's rules as read (file comments say which).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines.ttrl_extract import extract_ttrl_answer
from sarl.rewards.baselines.ttrl_grade import grade_answer, sympy_available
from sarl.rewards.registry import create_reward

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "ttrl_reference.json").read_text())
GROUPS = FIXTURE["groups"]


def run(responses: list[str], **settings: str) -> tuple[list[float], float]:
    out = create_reward("ttrl", settings).score_groups([[Sample(r) for r in responses]])[0]
    return [o.score for o in out], (out[0].components["majority_ratio"] if out else 0.0)


@pytest.mark.parametrize("i", range(len(GROUPS)))
def test_rewards_are_the_references(i: int) -> None:
    group = GROUPS[i]
    if not sympy_available() and any("x" in r for r in group["responses"]):
        pytest.skip("SymPy (sarl[math]) decides some algebraic equivalences")
    rewards, ratio = run(group["responses"])
    assert rewards == group["rewards"]
    assert ratio == pytest.approx(group["majority_ratio"], abs=1e-12)


def test_fixture_covers_every_group_size() -> None:
    assert {len(g["responses"]) for g in GROUPS} == set(range(1, 17))


@pytest.mark.parametrize(
    ("responses", "rewards", "ratio"),
    [
        # strings 0.5, \frac{1}{2}, 3, 3: "3" wins with 2 of 4; 0.5 and 1/2 are not "3"
        (["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{3}", "\\boxed{3}"], [0, 0, 1, 1], 0.5),
        # "he answer is" fallback: "7" twice beats the box's "8"
        (["The answer is 7", "The answer is 7", "\\boxed{8}"], [1, 1, 0], 2 / 3),
        # two empty boxes ("") tie with "3"; the first seen, "", wins and is rewarded
        (["\\boxed{}", "\\boxed{}", "\\boxed{3}", "\\boxed{3}"], [1, 1, 0, 0], 0.5),
        # a 1-1 tie goes to the first seen
        (["\\boxed{3}", "\\boxed{2}"], [1, 0], 0.5),
        # last-number fallback, "\boxed 5" without braces, an unclosed last box
        (["We get 7 apples", "Total: 7", "\\boxed{8}"], [1, 1, 0], 2 / 3),
        (["\\boxed 5", "\\boxed 5", "\\boxed{6}"], [1, 1, 0], 2 / 3),
        (["so \\boxed{12", "\\boxed{12}", "\\boxed{13}"], [1, 1, 0], 2 / 3),
        # the label is graded: x=5 is 5, and so on (label is the first majority string)
        (["\\boxed{6}", "\\boxed{x=5}", "\\boxed{5}"], [0, 1, 1], 2 / 3),
        (["\\boxed{30^\\circ}", "\\boxed{30}", "\\boxed{30}"], [1, 1, 1], 1.0),
        (["\\boxed{50\\%}", "\\boxed{50}", "\\boxed{50}"], [1, 1, 1], 1.0),
        (["\\boxed{5\\text{ cm}}", "\\boxed{5}", "\\boxed{5}"], [1, 1, 1], 1.0),
        (["\\boxed{\\frac34}", "\\boxed{\\dfrac{3}{4}}", "\\boxed{1}"], [1, 1, 0], 2 / 3),
        (["\\boxed{\\sqrt3}", "\\boxed{\\sqrt{3}}", "\\boxed{2}"], [1, 1, 0], 2 / 3),
        (["\\boxed{Yes}", "\\boxed{yes}", "\\boxed{yes}"], [1, 1, 1], 2 / 3),
        # unreduced fractions are refused by the grader: 2/4 is not 1/2
        (["\\boxed{2/4}", "\\boxed{1/2}", "\\boxed{1/2}"], [0, 1, 1], 2 / 3),
        ([], [], 0.0),
    ],
)
def test_hand_derived(responses: list[str], rewards: list[float], ratio: float) -> None:
    got, got_ratio = run(responses)
    assert got == rewards and got_ratio == pytest.approx(ratio)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{}", ""),
        ("no answer here", ""),
        ("The final answer is $3$. I hope it is correct.", "3"),
        ("\\boxed{1/2}", "\\frac{1}{2}"),
        ("\\boxed{12 \\text{ inches}}", "12"),
        ("\\boxed{five}", "5"),
        ("\\boxed{\\text{five}}", "five"),  # number words go before \text{} is unwrapped
    ],
)
def test_extraction(text: str, answer: str) -> None:
    assert extract_ttrl_answer(text) == answer


@pytest.mark.skipif(not sympy_available(), reason="needs SymPy (sarl[math])")
def test_sympy_step_equates_algebra_but_not_unreduced_fractions() -> None:
    assert grade_answer("1+x", "x+1") and grade_answer("\\sqrt{8}", "2\\sqrt{2}")
    assert not grade_answer("2/4", "1/2")


# --- the deliberate differences, one setting each (docs/baselines.md) --------------------------


def test_value_clusters_reward_equal_values() -> None:
    group = ["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{3}", "\\boxed{3}"]
    assert run(group)[0] == [0, 0, 1, 1]  # strings: "3" has 2 votes, 0.5 and 1/2 one each
    # values: {0.5, 1/2} ties {3, 3}; the first-seen cluster wins
    assert run(group, voting="value_clusters")[0] == [1, 1, 0, 0]


def test_boxed_only_ignores_fallbacks() -> None:
    group = ["The answer is 7", "The answer is 7", "\\boxed{8}"]
    assert run(group, extraction="boxed_only")[0] == [0, 0, 1]


def test_tie_break_none_and_abstaining_empty_answers() -> None:
    group = ["\\boxed{}", "\\boxed{}", "\\boxed{3}", "\\boxed{3}"]
    assert run(group, tie_break="none")[0] == [0, 0, 0, 0]
    assert run(group, unanswered="abstain")[0] == [0, 0, 1, 1]
