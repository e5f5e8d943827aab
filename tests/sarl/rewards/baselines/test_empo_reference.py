"""EMPO's defaults give the reference's rewards: QingyangZhang/EMPO's ``get_empo_math_reward``.

``fixtures/empo_reference.json`` holds inputs and outputs only: 114 groups (34 hand-made: ties,
empty boxes, fallback extraction, equivalent forms, all-distinct groups at the G where the
reference's float sum misses its gate; then 5 random groups for each G = 1..16 drawn from a pool
of answer forms), with the rewards and extracted answers that ``get_empo_math_reward(G)`` of
github.com/QingyangZhang/EMPO at c5eccd4 (``trl/src/open_r1/rewards.py``) gave when run unchanged
in a scratch environment under math-verify 0.5.2 (its pin; 0.6.0 gave the same), and, where it
differs, under math-verify 0.9.0 (the version ``sarl[math]`` installs). The hand-derived cases
below follow the reference's rules as read (comments say which).
"""

from __future__ import annotations

import json
import math
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines.empo_extract import normalize_answer
from sarl.rewards.baselines.math_verify import math_verify_available
from sarl.rewards.baselines.math_verify_pool import shared_pool
from sarl.rewards.registry import create_reward

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "empo_reference.json").read_text())
GROUPS = FIXTURE["groups"]
needs_math_verify = pytest.mark.skipif(
    not math_verify_available(), reason="the reference's extraction is math-verify's (sarl[math])"
)


def expected(group: dict[str, Any], key: str) -> list[Any]:
    """The reference's output under the installed math-verify (0.9's parse differs on several
    boxes in one response; the fixture keeps that run's output where it differs)."""
    major_minor = tuple(int(x) for x in version("math-verify").split(".")[:2])
    newer = group.get("math_verify_0.9.0")
    if major_minor >= (0, 9) and isinstance(newer, dict):
        return list(newer[key])
    return list(group[key])


def run(responses: list[str], **settings: object) -> list[float]:
    out = create_reward("empo", settings).score_groups([[Sample(r) for r in responses]])[0]
    return [o.score for o in out]


@needs_math_verify
@pytest.mark.parametrize("i", range(len(GROUPS)))
def test_rewards_are_the_references(i: int) -> None:
    assert run(GROUPS[i]["responses"]) == expected(GROUPS[i], "rewards")


@needs_math_verify
def test_extracted_answers_are_the_references() -> None:
    texts = [r for g in GROUPS for r in g["responses"]]
    got = shared_pool(1, 60.0).extract(texts, timeout_seconds=5.0)
    answers = [normalize_answer(a) if isinstance(a, str) else a for a in got]
    assert answers == [a for g in GROUPS for a in expected(g, "answers")]


def test_fixture_covers_every_group_size() -> None:
    assert {len(g["responses"]) for g in GROUPS} == set(range(1, 17))


def distinct(g: int) -> list[str]:
    return [f"\\boxed{{{i}}}" for i in range(g)]


@needs_math_verify
@pytest.mark.parametrize(
    ("responses", "rewards"),
    [
        # math-verify reads "The final answer is $3$": {3, 3}, {4}; H < log 3
        (["The final answer is $3$. I hope it is correct.", "\\boxed{3}", "\\boxed{4}"], [2, 2, 1]),
        # units stripped: 5 cm is 5
        (["\\boxed{5\\text{ cm}}", "\\boxed{5}", "\\boxed{6}"], [2, 2, 1]),
        # an empty box is no answer (parse finds nothing): it scores 0 and is a singleton in H
        (["\\boxed{}", "\\boxed{3}", "\\boxed{3}"], [0, 2, 2]),
        # two empty boxes are two singletons: 4 clusters of 1, H = log 4, gated
        (["\\boxed{}", "\\boxed{}", "\\boxed{3}", "\\boxed{4}"], [0, 0, 0, 0]),
        # strings, not values: 0.5 and 1/2 are two clusters (G = 4: quarters)
        (["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{3}", "\\boxed{3}"], [1, 1, 2, 2]),
        # boxes joined: "\boxed{3} and \boxed{}" reads "3,", not "3"
        (["\\boxed{3} and \\boxed{}", "\\boxed{3}", "\\boxed{3}"], [1, 2, 2]),
        # no fallback to "the answer is" or "\boxed 5": both are no answer
        (["The answer is 7", "The answer is 7", "\\boxed{8}"], [0, 0, 1]),
        # all distinct: gated where -(p log p).sum() reaches log G (4, 8, 16) ...
        (distinct(4), [0] * 4),
        (distinct(8), [0] * 8),
        (distinct(16), [0] * 16),
        # ... and kept where it falls one ulp short (3, 6, 7, 10, 14)
        (distinct(3), [1] * 3),
        (distinct(6), [1] * 6),
        (distinct(7), [1] * 7),
        (distinct(10), [1] * 10),
        (distinct(14), [1] * 14),
        (["\\boxed{7}"], [0]),  # G = 1: H = 0 = log 1, gated
    ],
)
def test_hand_derived(responses: list[str], rewards: list[int]) -> None:
    g = len(responses)
    assert run(responses) == [r / g for r in rewards]


def test_one_ulp_misses_are_the_reference_float_sum() -> None:
    """Where the reference keeps an all-distinct group, its H is below log G by rounding only."""
    for g in (3, 6, 7, 10, 14, 21, 22, 24, 25):
        out = create_reward("empo", {"extraction": "boxed_only"}).score_groups(
            [[Sample(r) for r in distinct(g)]]
        )[0]
        entropy = out[0].components["semantic_entropy"]
        assert entropy < math.log(g) and math.log(g) - entropy <= 2 * math.ulp(math.log(g))
        assert [o.score for o in out] == [1 / g] * g and out[0].components["gated"] == 0.0


# --- the deliberate differences, one setting each (docs/baselines.md) --------------------------


@needs_math_verify
def test_boxed_only_ignores_the_final_answer_sentence() -> None:
    group = ["The final answer is $3$. I hope it is correct.", "\\boxed{3}", "\\boxed{4}"]
    assert run(group, extraction="boxed_only") == [0, 1 / 3, 1 / 3]  # H one ulp below log 3


def test_boxed_only_counts_an_empty_box_as_an_answer() -> None:
    group = ["\\boxed{}", "\\boxed{3}", "\\boxed{3}"]
    assert run(group, extraction="boxed_only") == [1 / 3, 2 / 3, 2 / 3]


def test_value_clusters_join_equal_values() -> None:
    group = ["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{3}", "\\boxed{3}"]
    assert run(group, extraction="boxed_only", clustering="values") == [0.5] * 4


def test_exact_arithmetic_gates_every_all_distinct_group() -> None:
    for g in (3, 7, 14):
        assert run(distinct(g), extraction="boxed_only", gate_arithmetic="exact") == [0.0] * g


def test_excluded_unanswered_lowers_h_below_log_g() -> None:
    group = ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "no answer"]
    assert run(group, extraction="boxed_only") == [0.0] * 4  # singleton: H = log 4
    assert run(group, extraction="boxed_only", unanswered="excluded") == [0.25] * 3 + [0.0]
