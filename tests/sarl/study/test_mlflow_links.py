"""A Study in MLflow's UI: one colour per arm (run tag ``mlflow.runColor``), and the links a
finished Study prints (the ``mlflow ui`` command, its chart view, each run's page).

Real parts: the demo Study document (``examples/studies/local-demo.yaml``), a real MLflow server
(``tests/support/mlflow_server.py``) that stores the runs and serves the UI the links point at,
and the UI bundle of the installed MLflow, whose code is what reads the tag and the view
parameter (issue 40 item 4).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from sarl import display
from sarl.spec.loader import load_study
from sarl.spec.study import ARM_COLORS, STUDY_COLOR, TAG_ARM, TAG_COLOR, Study
from sarl.study.result import RunOutcome, StudyResult
from sarl.tracking.describe import CHART_VIEW_QUERY
from sarl.tracking.tracker import Tracker

mlflow = pytest.importorskip("mlflow")

DEMO = Path(__file__).parents[3] / "examples" / "studies" / "local-demo.yaml"
_HEX = re.compile(r"^#[0-9A-F]{6}$")


def _demo() -> Study:
    return load_study(DEMO)


def test_each_arm_has_one_colour_for_all_its_seeds_and_the_arms_differ() -> None:
    colours: dict[str, set[str]] = {}
    for run in _demo().runs():
        colours.setdefault(run.arm, set()).add(run.experiment.spec.tracking.tags[TAG_COLOR])
    assert all(len(c) == 1 for c in colours.values()), colours
    chosen = [next(iter(c)) for c in colours.values()]
    assert len(set(chosen)) == len(chosen) == 2
    assert all(_HEX.match(c) for c in chosen)


def test_a_colour_the_spec_sets_itself_is_kept() -> None:
    doc: dict[str, Any] = load_study(DEMO).model_dump(mode="json")
    doc["spec"]["arms"][1]["override"]["tracking"] = {"tags": {TAG_COLOR: "#123456"}}
    runs = load_study(doc).runs()
    by_arm = {r.arm: r.experiment.spec.tracking.tags[TAG_COLOR] for r in runs}
    assert by_arm == {"ground-truth": ARM_COLORS[0], "structure": "#123456"}


def _js(pattern: str) -> str:
    root = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in root.glob(pattern))


def test_the_installed_mlflow_ui_reads_the_colour_tag_and_the_view_parameter() -> None:
    """What sarl relies on, in the UI code of the MLflow it runs against: a run's colour from
    tag ``mlflow.runColor`` and the experiment page's view from ``compareRunsMode`` (CHART)."""
    bundle = _js("*.js")
    assert f'"{TAG_COLOR}"' in bundle
    assert "INITIALIZE_RUN_COLORS" in bundle  # the reducer that loads colours from the tags
    key, value = CHART_VIEW_QUERY.split("=")
    assert f'="{key}"' in bundle and f'value:"{value}"' in bundle


def test_the_server_returns_each_runs_arm_colour(mlflow_server: Any) -> None:
    """The runs as the local runner starts them (``Tracker.start_experiment``): the server keeps
    the colour tag the UI reads, the same for both seeds of an arm."""
    study = _demo()
    trackers = [
        Tracker.start_experiment(mlflow_server.url, r.experiment, backend="trl")
        for r in study.runs()
    ]
    for tracker in trackers:
        tracker.finish("FINISHED")
    client = mlflow.MlflowClient(mlflow_server.url)
    experiment = client.get_experiment_by_name(study.mlflow_experiment)
    found = client.search_runs([experiment.experiment_id])
    by_arm: dict[str, set[str]] = {}
    for run in found:
        by_arm.setdefault(run.data.tags[TAG_ARM], set()).add(run.data.tags[TAG_COLOR])
    assert by_arm == {"ground-truth": {ARM_COLORS[0]}, "structure": {ARM_COLORS[1]}}


def _result(uri: str, experiment_id: str | None = "7") -> StudyResult:
    outcomes = [
        RunOutcome("ground-truth", 0, "local-demo-ground-truth-s0", "finished", "a" * 32),
        RunOutcome("structure", 0, "local-demo-structure-s0", "finished", "b" * 32),
        RunOutcome("structure", 1, "local-demo-structure-s1", "failed", error="boom"),
    ]
    return StudyResult("local-demo", "p" * 32, uri, outcomes, experiment_id=experiment_id)


def test_a_local_study_prints_the_mlflow_ui_command_its_chart_view_and_each_run() -> None:
    uri = "sqlite:////tmp/x/.sarl/mlflow.db"
    text = display.to_text(_result(uri), width=400)
    base = "http://127.0.0.1:5000/#/experiments/7/runs"
    assert f"browse it: mlflow ui --backend-store-uri {uri}" in text
    assert f"then open {base}?workflowType=machine_learning&compareRunsMode=CHART" in text
    for rid, name in (("a", "ground-truth-s0"), ("b", "structure-s0")):
        assert f"{base}/{rid * 32}?workflowType=machine_learning (run local-demo-{name})" in text
    assert "local-demo-structure-s1)" not in text  # a failed run has no MLflow run to open


def test_a_server_study_links_to_the_server_and_its_pages_load(mlflow_server: Any) -> None:
    lines = _result(mlflow_server.url).browse_lines()
    assert not any("mlflow ui" in line for line in lines)
    urls = [line.split()[1] for line in lines]
    assert urls[0] == (
        f"{mlflow_server.url}/#/experiments/7/runs?workflowType=machine_learning&{CHART_VIEW_QUERY}"
    )
    assert len(urls) == 3
    # The part before '#' is what the browser fetches: the server's UI page.
    page = httpx.get(urls[0].split("#")[0], timeout=10.0)
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_no_links_without_an_experiment_or_for_a_store_without_a_ui() -> None:
    assert _result("sqlite:////tmp/x/mlflow.db", experiment_id=None).browse_lines() == []
    assert _result("file:///tmp/mlruns").browse_lines() == []


def test_sarl_study_run_prints_the_links_uncut(capsys: pytest.CaptureFixture[str]) -> None:
    """What ``sarl study run`` prints at the end (its ``_print``), piped: the command and every
    link whole on one line, however narrow the terminal."""
    from sarl.cli.study_run import _print

    result = _result("sqlite:////tmp/a/very/long/path/to/the/checkout/.sarl/mlflow.db")
    _print(result)
    out = capsys.readouterr().out.splitlines()
    for line in result.browse_lines():
        assert line in out
    assert any(CHART_VIEW_QUERY in line for line in out)


def test_the_studys_parent_run_is_grey(mlflow_server: Any, tmp_path: Path) -> None:
    """Untagged, the parent run got MLflow's own colour, a blue close to the first arm's (seen
    in the chart view of the demo's store with the parent row expanded)."""
    from sarl.study.runner import open_parent_run

    doc: dict[str, Any] = _demo().model_dump(mode="json")
    doc["metadata"]["name"] = "grey-parent"
    parent = open_parent_run(load_study(doc), mlflow_server.url, tmp_path / "spool")
    parent.finish("FINISHED")
    run = mlflow.MlflowClient(mlflow_server.url).get_run(parent.run_id)
    assert run.data.tags[TAG_COLOR] == STUDY_COLOR
    assert STUDY_COLOR not in ARM_COLORS
