"""A ``Comparison`` as a notebook and a terminal show it: columns named after the runs (a short id
only where names repeat), params and final metrics as a pandas DataFrame, the curves as an inline
figure; and ``sarl.compare`` / ``Client.local().compare`` on run results or ids."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import sarl
from sarl import display
from sarl.runner.result import RunResult
from sarl.tracking import compare as compare_module
from sarl.tracking.compare import Comparison, RunSummary

A, B, C = "a" * 32, "b" * 32, "c" * 32


def _comparison(names: tuple[str, str, str] = ("low-lr", "high-lr", "base")) -> Comparison:
    runs = tuple(
        RunSummary(run_id, name, "FINISHED", "1")
        for run_id, name in zip((A, B, C), names, strict=True)
    )
    return Comparison(
        uri="sqlite:///x.db",
        runs=runs,
        differing_params={"algorithm.learning_rate": {A: "1e-06", B: "1e-05", C: None}},
        final_metrics={A: {"reward/mean": 0.25, "kl": 0.01}, B: {"reward/mean": 0.5}, C: {}},
        histories={
            A: {"reward/mean": [(1, 0.1), (2, 0.25)]},
            B: {"reward/mean": [(1, 0.2), (2, 0.5)], "accuracy": [(1, 0.3)]},
            C: {},
        },
    )


def test_columns_are_run_names_when_they_are_unique() -> None:
    assert _comparison().labels == {A: "low-lr", B: "high-lr", C: "base"}


def test_repeated_names_get_a_short_id() -> None:
    labels = _comparison(("same", "same", "other")).labels
    assert labels == {A: f"same ({A[:8]})", B: f"same ({B[:8]})", C: "other"}


def test_nameless_runs_get_their_id() -> None:
    assert _comparison(("", "x", "y")).labels[A] == f" ({A[:8]})"


def test_html_tables_have_a_column_per_run_name() -> None:
    html = _comparison()._repr_html_()
    assert "Comparison of 3 runs" in html
    assert "<thead><tr><th>param</th><th>low-lr</th><th>high-lr</th><th>base</th></tr>" in html
    assert "<thead><tr><th>metric</th><th>low-lr</th><th>high-lr</th><th>base</th></tr>" in html
    assert "<tr><td>algorithm.learning_rate</td><td>1e-06</td><td>1e-05</td><td>—</td></tr>" in html
    assert '<tr><td>kl</td><td class="num">0.01</td><td class="num">—</td>' in html


def test_terminal_text_has_the_same_tables() -> None:
    text = display.to_text(_comparison(), width=200)
    for piece in ("Comparison of 3 runs", "params that differ", "final metrics", "low-lr"):
        assert piece in text
    assert A in text  # the runs table names each run's id


def test_to_frame() -> None:
    frame = _comparison().to_frame()
    assert list(frame.columns) == ["low-lr", "high-lr", "base"]
    assert frame.columns.name == "run"
    assert list(frame.index) == [
        ("param", "algorithm.learning_rate"),
        ("metric", "kl"),
        ("metric", "reward/mean"),
    ]
    assert frame.loc[("param", "algorithm.learning_rate"), "base"] is None
    metrics = frame.loc["metric"].astype(float)
    assert metrics.loc["reward/mean", "high-lr"] == 0.5
    assert math.isnan(metrics.loc["kl", "high-lr"])


def test_curves_frame() -> None:
    frame = _comparison().curves_frame()
    assert list(frame.columns) == ["run", "metric", "step", "value"]
    high = frame[(frame.run == "high-lr") & (frame.metric == "reward/mean")]
    assert list(high.step) == [1, 2] and list(high.value) == [0.2, 0.5]


def test_figure_is_inline_with_a_legend_of_run_names() -> None:
    fig = _comparison().figure()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["low-lr", "high-lr", "base"]
    reward = fig.axes[0]
    assert reward.get_title() == "reward" and len(reward.lines) == 2
    assert "(no data: base)" in reward.get_xlabel()
    assert fig._repr_png_().startswith(b"\x89PNG")


def test_empty_comparison_renders() -> None:
    empty = Comparison(uri="sqlite:///x.db", runs=())
    assert "Comparison of 0 runs" in empty._repr_html_()
    assert empty.to_frame().empty
    assert empty.figure()._repr_png_().startswith(b"\x89PNG")


# -- sarl.compare and LocalClient.compare ----------------------------------------------------------


def _result(run_id: str, uri: str) -> RunResult:
    return RunResult(run_id, None, uri, "/ckpt", 2, name=f"run-{run_id[:1]}")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def fake_compare_runs(uri: str, **kwargs: Any) -> str:
        seen.append({"uri": uri, **kwargs})
        return "comparison"

    monkeypatch.setattr(compare_module, "compare_runs", fake_compare_runs)
    return seen


def test_compare_takes_results_and_ids(calls: list[dict[str, Any]]) -> None:
    assert sarl.compare(_result(A, "sqlite:///s.db"), B, experiments=["e"]) == "comparison"
    assert calls == [
        {"uri": "sqlite:///s.db", "run_ids": [A, B], "experiments": ["e"], "latest": False}
    ]


def test_compare_refuses_results_from_two_stores(calls: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match="different stores"):
        sarl.compare(_result(A, "sqlite:///one.db"), _result(B, "sqlite:///two.db"))
    sarl.compare(_result(A, "sqlite:///one.db"), _result(B, "sqlite:///two.db"), tracking_uri="u")
    assert calls[-1]["uri"] == "u"


def test_compare_defaults_to_the_local_store(
    calls: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sarl.compare(A)
    assert calls[-1]["uri"] == f"sqlite:///{tmp_path.resolve()}/.sarl/mlflow.db"


def test_local_client_compares_in_its_own_store(
    calls: list[dict[str, Any]], tmp_path: Path
) -> None:
    sarl.Client.local(workdir=tmp_path / "w").compare(A, latest=True)
    assert calls[-1]["uri"] == f"sqlite:///{(tmp_path / 'w').resolve()}/mlflow.db"
    assert calls[-1]["latest"] is True
    sarl.Client.local(tracking_uri="http://mlflow:5000").compare(_result(A, "sqlite:///s.db"))
    assert calls[-1]["uri"] == "http://mlflow:5000"
