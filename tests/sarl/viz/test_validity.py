"""The picture of ``sarl reward diagnose --plot``: a row per reward figure on two panels, the
interval as a bar, the chance line, "undefined" where a figure is, the PNG written."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sarl.evaluation.diagnosis import FigureDiagnosis, diagnose
from sarl.viz.validity import plot_validity, validity_figure

CORRECT = [True, False, True, False, True, False]
GROUPS = ["p", "p", "q", "q", "r", "r"]
COLUMNS = {
    "structure": {
        "score": [0.9, 0.1, 0.8, 0.2, 0.3, 0.7],
        "path_length": [math.nan] * 6,  # undefined everywhere
    },
    "ground_truth": {"score": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]},
}


def _rows() -> list[FigureDiagnosis]:
    return diagnose(COLUMNS, CORRECT, GROUPS, resamples=50)


def test_two_panels_with_a_row_per_figure() -> None:
    fig = validity_figure(_rows(), "title")
    pairs, auroc = fig.axes  # the headline first
    assert [pairs.get_title(), auroc.get_title()] == [
        "within-prompt AUROC (headline)",
        "pooled AUROC (secondary: mixes prompts)",
    ]
    labels = [t.get_text() for t in pairs.get_yticklabels()]
    assert labels == [
        "structure: score (SR)",
        "structure: path_length (L)  (lower = better)",
        "ground_truth: score",
    ]
    for ax in (auroc, pairs):
        texts = [t.get_text() for t in ax.texts]
        assert "undefined" in texts  # path_length
        assert any(line.get_xdata()[0] == 0.5 for line in ax.lines)  # the chance line
        assert ax.get_xlim() == pytest.approx((-0.02, 1.02))
    assert "0.889" in [t.get_text() for t in auroc.texts]  # SR's AUROC: 8 of 9 pairs
    # the headline reads with its counts: 2 of 3 pairs right, 3 prompts with pairs
    assert "0.667 (3 prompts, 3 pairs)" in [t.get_text() for t in pairs.texts]
    assert "warning: 3 prompts with pairs (< 20)" in fig.get_suptitle()


def test_trivial_predictors_sit_beside_the_rewards_and_a_reward_below_them_is_marked() -> None:
    from sarl.evaluation.trivial import trivial_scores

    responses = ["\\boxed{1}", "no answer"] * 3  # the wrong ones never answer
    rows = diagnose(COLUMNS, CORRECT, GROUPS, baselines=trivial_scores(responses), resamples=50)
    fig = validity_figure(rows, "title")
    pairs, _ = fig.axes
    ticks = pairs.get_yticklabels()
    labels = [t.get_text() for t in ticks]
    assert labels[-2:] == ["trivial.has_answer: score", "trivial.format_valid: score"]
    # "has an answer" orders every pair right here (1.0): SR (2 of 3) does not beat it
    sr = labels.index("structure: score (SR)  NOT ABOVE TRIVIAL")
    assert ticks[sr].get_color() == "#c00000"
    assert "ground_truth: score  NOT ABOVE TRIVIAL" in labels  # equal is not above
    dashed = [line for line in pairs.lines if line.get_linestyle() == "--"]
    assert [line.get_xdata()[0] for line in dashed] == [1.0]  # the floor, across the panel


def test_plot_writes_a_png_and_refuses_nothing_to_draw(tmp_path: Path) -> None:
    out = plot_validity(_rows(), "title", tmp_path / "sub" / "v.png")
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match="no reward figures"):
        validity_figure([], "title")
