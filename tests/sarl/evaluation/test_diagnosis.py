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
        "samples",
        "correct",
        "pairs",
    }
    assert len(sr["auroc_interval"]) == 2
    assert len(doc["rewards"]["structure"]["notes"]) == 1
    assert doc["rewards"]["ground_truth"]["notes"] == []
