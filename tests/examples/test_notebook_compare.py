"""``examples/notebooks/02-compare.ipynb`` runs top to bottom in a real kernel with CI-sized
settings, in a temporary working directory, with nothing on stderr: two runs compared (tables
with a column per run name, a DataFrame, the curves inline), then a small Study (2 arms x 2
seeds) with its table of intervals and its curves inline.

The Study runs in the kernel's process (``JOBS=1``): on 2 cores two run processes would each
import torch and load the embedder; the parallel path is covered by ``tests/sarl/study``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nbformat import NotebookNode

from tests.examples.notebooks import NOTEBOOKS
from tests.examples.small import (
    EXAMPLES,
    SMALL,
    assert_every_cell_ran,
    assert_no_stderr,
    cell,
    execute_small,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

NAME = "02-compare.ipynb"
# start → end [low, high], and where the interval reached past the metric's range, the range
INTERVAL = r"\d\.\d{3} → \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]( clipped to \[0, 1\])?"


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[NotebookNode, Path]:
    parameters = {
        "EXAMPLES": str(EXAMPLES),
        "OVERRIDES": SMALL,
        "STUDY_OVERRIDES": SMALL,
        "SEEDS": [0, 1],
        "JOBS": 1,
    }
    return execute_small(tmp_path_factory, NAME, parameters)


def test_every_cell_ran(executed: tuple[NotebookNode, Path]) -> None:
    assert_every_cell_ran(executed[0])


def test_no_cell_wrote_to_stderr(executed: tuple[NotebookNode, Path]) -> None:
    """A front end shows each stderr output as a red box (issue 40 item 5: notebook 02 had
    four)."""
    assert_no_stderr(executed[0])


def test_two_runs_each_with_a_progress_bar(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    html = cell(nb, "ground_truth = client.run(").html
    assert html.count("training: 100%") == 2


def test_comparison_has_a_column_per_run_name(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    html = cell(nb, "comparison = sarl.compare(ground_truth, structure)").html
    assert "Comparison of 2 runs" in html
    header = "<th>local-ground-truth</th><th>local-structure</th></tr>"
    assert f"<tr><th>param</th>{header}" in html
    assert f"<tr><th>metric</th>{header}" in html
    assert "<tr><td>reward.0.name</td><td>ground_truth</td><td>structure</td></tr>" in html


def test_comparison_as_a_dataframe_and_a_figure(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    frame = cell(nb, "frame = comparison.to_frame()")
    assert "local-ground-truth" in frame.html and "structure/score" in frame.html
    figure = cell(nb, "comparison.figure()")
    assert len(figure.data("image/png")) == 1


def test_study_shows_its_table_with_intervals(executed: tuple[NotebookNode, Path]) -> None:
    nb, cwd = executed
    html = cell(nb, "study = client.study(").html
    assert "Study local-demo: 4 runs (4 finished)" in html
    assert "<caption>arms (reference: ground-truth)</caption>" in html
    assert len(re.findall(f"<td>{INTERVAL}</td>", html)) >= 4  # avg@k and SR of both arms
    assert "<caption>paired differences vs ground-truth" in html
    for run in ("local-demo-ground-truth-s0", "local-demo-structure-s1"):
        assert f"<td>{run}</td>" in html
    assert {p.name for p in (cwd / "out" / "local-demo").iterdir()} >= {
        "summary.json",
        "report.md",
        "curves.png",
    }


def test_study_as_a_dataframe_and_its_bands(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    frame = cell(nb, "study.to_frame()").html
    assert "eval_accuracy_end" in frame
    for stat in ("mean", "low", "high"):
        assert f"<th>{stat}</th>" in frame
    assert len(cell(nb, "study.figure()").data("image/png")) == 1


def test_nothing_is_written_next_to_the_notebook(executed: tuple[NotebookNode, Path]) -> None:
    assert not (NOTEBOOKS / ".sarl").exists()
    assert not (NOTEBOOKS / "out").exists()
