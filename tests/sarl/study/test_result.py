"""``StudyResult`` as a notebook shows it: the report's table per arm with intervals, the paired
differences and each run's outcome (HTML and text alike), the per-arm numbers as a DataFrame, and
the curves with their bands drawn from the runs read back from MLflow."""

from __future__ import annotations

import math

import pytest

from sarl import display
from sarl.spec.study import Study
from sarl.study.report import build_report
from sarl.study.result import RunOutcome, StudyResult
from tests.sarl.study.conftest import ARMS, REFERENCE, SEEDS, K, history


def _result(
    study: Study | None = None, parent: str = "p" * 32, uri: str = "sqlite:///x.db"
) -> StudyResult:
    report = build_report(
        study.name if study else "demo",
        REFERENCE,
        list(ARMS),
        [history(arm, seed) for arm in ARMS for seed in SEEDS],
        K,
    )
    outcomes = [
        RunOutcome(arm, seed, f"demo-{arm}-s{seed}", "finished", f"{arm}{seed}".ljust(32, "0"))
        for seed in SEEDS
        for arm in ARMS
    ]
    outcomes[-1] = RunOutcome("gt", 1, "demo-gt-s1", "failed", error="RuntimeError: <boom>")
    return StudyResult("demo", parent, uri, outcomes, report)


def test_html_has_the_arms_table_with_intervals_and_the_runs() -> None:
    html = _result()._repr_html_()
    assert "Study demo: 4 runs (3 finished, 1 failed)" in html
    assert "<caption>arms (reference: gt)</caption>" in html
    assert f"<th>avg@{K} start → end</th>" in html
    # held-out avg@k of the reference arm: 0.205 at the start, 0.305 [low, high] at the end
    assert "<td>0.205 → 0.305 [0.241, 0.369]</td>" in html
    assert "<td>reference</td>" in html
    assert "<caption>paired differences vs gt (arm − reference, same seeds)</caption>" in html
    assert "<td>demo-gt-s1</td><td>gt</td><td>1</td><td>failed</td>" in html
    assert "RuntimeError: &lt;boom&gt;" in html  # escaped


def test_text_says_the_same() -> None:
    assert str(_result()).startswith("Study demo: 4 runs (3 finished, 1 failed)")
    text = display.to_text(_result(), width=400)  # wide enough that no cell folds
    for piece in ("Study demo: 4 runs", "arms (reference: gt)", "0.205 → 0.305 [0.241, 0.369]"):
        assert piece in text
    assert "demo-gt-s1" in text and "failed" in text


def test_to_frame_has_mean_and_interval_per_arm() -> None:
    frame = _result().to_frame()
    assert list(frame.index) == list(ARMS)
    assert list(frame["eval_accuracy_end"].columns) == ["mean", "low", "high", "n"]
    gt = frame.loc["gt", "eval_accuracy_end"]
    assert gt["mean"] == pytest.approx(0.305)
    assert gt["low"] < gt["mean"] < gt["high"] and gt["n"] == 2
    sarl = frame.loc["sarl", "sr_change"]
    assert sarl["mean"] == pytest.approx(0.15)  # quarter means: 0.20 x (15/16 - 3/16)


def test_without_a_report() -> None:
    result = StudyResult("demo", "p" * 32, "sqlite:///x.db", [RunOutcome("a", 0, "r", "failed")])
    assert result.to_frame().empty
    assert "no report: no run finished" in result._repr_html_()
    with pytest.raises(ValueError, match="no finished runs"):
        result.figure()


def test_figure_draws_the_curves_from_mlflow(
    store_uri: str, logged_study: tuple[Study, str]
) -> None:
    study, parent = logged_study
    fig = _result(study, parent, store_uri).figure()
    axes = fig.axes
    assert [a.get_title() for a in axes[:2]] == [f"held-out avg@{K}", "SR (structure reward)"]
    held_out = axes[0]
    # Two seeds an arm: each seed thin and the mean thick, no band (bands start at 3 seeds).
    assert len(held_out.lines) == len(ARMS) * (len(SEEDS) + 1)
    assert not held_out.collections
    assert fig._repr_png_().startswith(b"\x89PNG")  # shown inline in a notebook


def test_curves_png_is_where_the_report_wrote(tmp_path: object) -> None:
    result = _result()
    assert result.curves_png is None
    result.out_dir = tmp_path  # type: ignore[assignment]
    assert result.curves_png == tmp_path / "curves.png"  # type: ignore[operator]
    assert not math.isnan(result.to_frame().loc["sarl", ("sr_end", "mean")])
