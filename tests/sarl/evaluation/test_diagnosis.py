"""The diagnosis table of ``sarl reward diagnose``: one row per (reward, figure) with the point
figures of :func:`validity` and intervals, labels and notes, and its JSON document."""

from __future__ import annotations

import json
import math

import pytest

from sarl.evaluation.diagnosis import diagnose, diagnosis_json, figure_note
from sarl.evaluation.validity import validity
from tests.sarl.evaluation.reference_bootstrap import bootstrap_intervals

CORRECT = [True, False, True, False, True, False]
GROUPS = ["p", "p", "q", "q", "r", "r"]
COLUMNS = {
    "structure": {
        "score": [0.9, 0.1, 0.8, 0.2, 0.3, 0.7],
        "clustering": [0.5] * 6,
        "path_length": [1.0, 3.0, math.nan, 2.0, 1.5, 2.5],
    },
    "ground_truth": {"score": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]},
}


def test_one_row_per_reward_figure_with_point_figures_and_intervals() -> None:
    rows = diagnose(COLUMNS, CORRECT, GROUPS, resamples=100, seed=3)
    assert [(r.reward, r.figure) for r in rows] == [
        ("structure", "score"),
        ("structure", "clustering"),
        ("structure", "path_length"),
        ("ground_truth", "score"),
    ]
    for row in rows:
        values = COLUMNS[row.reward][row.figure]
        assert row.validity == validity(values, CORRECT, GROUPS)
        expected = bootstrap_intervals(values, CORRECT, GROUPS, resamples=100, seed=3)
        assert set(row.intervals) == set(expected)
        for name, interval in expected.items():
            assert row.intervals[name] == pytest.approx(interval)
    sr = rows[0].validity
    assert (sr.auroc, sr.pair_agreement, sr.pairs) == (
        pytest.approx(8 / 9),
        pytest.approx(2 / 3),
        3,
    )
    assert rows[1].validity.pair_ties == 1.0  # a constant ties every pair
    assert rows[2].validity.samples == 5  # the NaN is left out


def test_labels_and_the_lower_is_better_note() -> None:
    rows = diagnose(COLUMNS, CORRECT, GROUPS, resamples=10)
    assert [r.label for r in rows] == ["score (SR)", "clustering (C)", "path_length (L)", "score"]
    assert figure_note("structure", "score") is None
    note = figure_note("structure", "path_length")
    assert note is not None and "lower is better" in note and "below 0.5" in note


def test_json_document() -> None:
    rows = diagnose(COLUMNS, CORRECT, GROUPS, resamples=50)
    doc = json.loads(json.dumps(diagnosis_json(rows, {"input": "x"}), allow_nan=False))
    assert doc["input"] == "x"
    assert list(doc["rewards"]) == ["structure", "ground_truth"]
    sr = doc["rewards"]["structure"]["figures"]["score"]
    assert set(sr) == {
        "auroc",
        "auroc_interval",
        "pair_agreement",
        "pair_agreement_interval",
        "pair_ties",
        "pair_ties_interval",
        "pair_auroc",
        "pair_auroc_interval",
        "samples",
        "correct",
        "pairs",
        "prompts",
        "mixed_prompts",
        "warning",
        "versus_trivial",
        "flagged",
    }
    assert (sr["prompts"], sr["mixed_prompts"]) == (3, 3)
    assert "only 3 prompts" in sr["warning"]
    assert len(sr["auroc_interval"]) == 2
    assert len(doc["rewards"]["structure"]["notes"]) == 1
    assert doc["rewards"]["ground_truth"]["notes"] == []


# Four prompts; in each, one response has no answer (never correct): "has an answer" alone
# orders those pairs right and ties the rest.
RESPONSES = ["\\boxed{1}", "\\boxed{2}", "no answer"] * 4
T_CORRECT = [True, False, False] * 4
T_GROUPS = [g for g in range(4) for _ in range(3)]


def test_each_reward_figure_is_compared_with_the_strongest_trivial_predictor() -> None:
    from sarl.evaluation.trivial import HAS_ANSWER, trivial_scores

    columns = {
        "oracle": {"score": [1.0 if c else 0.0 for c in T_CORRECT]},
        "answer_only": {"score": [1.0, 1.0, 0.0] * 4},  # the trivial predictor itself
    }
    rows = diagnose(columns, T_CORRECT, T_GROUPS, baselines=trivial_scores(RESPONSES),
                    resamples=200, seed=1)  # fmt: skip
    by = {(r.reward, r.figure): r for r in rows}
    assert [r.reward for r in rows][-2:] == ["trivial.has_answer", "trivial.format_valid"]
    floor = by[HAS_ANSWER, "score"]
    assert floor.trivial and floor.versus == {} and not floor.flagged
    assert floor.validity.pair_auroc == pytest.approx(0.75)  # 1 of 2 pairs right, 1 tied
    oracle = by["oracle", "score"].versus["pair_auroc"]
    assert (oracle.baseline, oracle.baseline_value) == (HAS_ANSWER, pytest.approx(0.75))
    assert oracle.difference == pytest.approx(0.25)
    assert oracle.interval == pytest.approx((0.25, 0.25))  # identical prompts: a point
    assert oracle.beats and not by["oracle", "score"].flagged
    same = by["answer_only", "score"]
    assert same.headline is not None and same.headline.difference == 0.0
    assert same.flagged  # equal to the floor is not above it
    diagnosis_json(rows, {})  # serialisable with the comparisons


def test_a_lower_is_better_component_is_compared_the_right_way_round() -> None:
    from sarl.evaluation import diagnosis
    from sarl.evaluation.trivial import trivial_scores

    lower = ("structure", "path_length")
    assert lower in diagnosis.LOWER_IS_BETTER
    # path length 1 for the correct response, 2 and 3 for the wrong ones: valid read lower
    columns = {"structure": {"path_length": [1.0, 2.0, 3.0] * 4}}
    rows = diagnose(columns, T_CORRECT, T_GROUPS, baselines=trivial_scores(RESPONSES),
                    resamples=100)  # fmt: skip
    row = rows[0]
    assert row.validity.pair_auroc == 0.0  # as computed: reversed
    assert row.headline is not None and row.headline.difference == pytest.approx(1.0 - 0.75)
    assert not row.flagged


def test_without_baselines_nothing_is_compared() -> None:
    rows = diagnose(COLUMNS, CORRECT, GROUPS, resamples=20)
    assert all(r.versus == {} and not r.flagged for r in rows)
