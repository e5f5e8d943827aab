"""``examples/notebooks/01-quickstart.ipynb`` runs top to bottom in a real kernel with CI-sized
settings, in a temporary working directory, and shows what it promises: the validated spec and
the readable errors of bad ones, a progress bar and the run's summary as HTML, the reasoning maps
inline, offline scores of the bundled traces, the run found in MLflow; and no cell writes to
stderr (a front end's error box).

A cell that raises fails the test (nbclient's ``CellExecutionError`` names the cell).
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
    cells,
    execute_small,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

NAME = "01-quickstart.ipynb"


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[NotebookNode, Path]:
    return execute_small(tmp_path_factory, NAME, {"EXAMPLES": str(EXAMPLES), "OVERRIDES": SMALL})


def test_every_cell_ran(executed: tuple[NotebookNode, Path]) -> None:
    assert_every_cell_ran(executed[0])


def test_no_cell_wrote_to_stderr(executed: tuple[NotebookNode, Path]) -> None:
    assert_no_stderr(executed[0])


def test_spec_is_validated_with_the_injected_settings(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    out = cell(nb, "experiment = client.validate(spec_file, overrides=OVERRIDES)").stdout
    assert "local-structure - grpo arithmetic" in out
    assert "max_steps: 2" in out  # the parameters the test injected reached the spec


def test_bad_specs_say_which_field_in_one_line(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    lines = cell(nb, "except sarl.SpecError as error").stdout.splitlines()
    assert len(lines) == 2
    # The file, and that overrides took part: the bad values are theirs.
    where = f"{EXAMPLES / 'local-structure.yaml'} + overrides: "
    assert lines[0] == f"{where}spec.algorithm.learning_rate=-1.0: Input should be greater than 0"
    # The field is named, and the closest reward name suggested.
    assert lines[1] == (
        f"{where}spec.reward[0].name='structur': unknown reward; did you mean 'structure'?"
    )


def test_run_shows_a_progress_bar_and_its_summary(executed: tuple[NotebookNode, Path]) -> None:
    nb, cwd = executed
    run = cell(nb, "result = client.run(experiment)")
    bars = [h for h in run.data("text/html") if 'class="sarl-progress"' in h]
    assert any("training: 100%" in b and '<progress value="2" max="2"' in b for b in bars)
    assert "Training Loss" not in run.html  # transformers' own notebook bar stays off
    summary = run.data("text/html")[-1]  # the cell's result: the RunResult
    assert "<b>Run local-structure: 2 steps</b>" in summary
    assert "<caption>final metrics</caption>" in summary
    assert f"mlflow ui --backend-store-uri sqlite:///{cwd.resolve()}/.sarl/mlflow.db" in summary
    frame = cell(nb, "result.to_frame()").html
    assert "reward/structure" in frame and "local-structure" in frame


def test_reasoning_maps_are_shown_inline(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    html = cell(nb, "result.maps()").html
    assert "local-structure: reasoning maps at step 2" in html
    assert html.count("data:image/png;base64,") >= 1


def test_traces_are_scored_with_two_rewards(executed: tuple[NotebookNode, Path]) -> None:
    nb, _ = executed
    table = cell(nb, "scores = pd.DataFrame").html
    for column in ("structure", "ground_truth", "mul-1", "div-4"):
        assert column in table
    (gallery,) = [c for c in cells(nb) if c.source.strip() == "maps"]
    assert "reasoning maps of two traces" in gallery.html
    assert gallery.html.count("data:image/png;base64,") == 2
    assert re.search(r"<figcaption>mul-1</figcaption>", gallery.html)


def test_the_run_is_in_mlflow(executed: tuple[NotebookNode, Path]) -> None:
    nb, cwd = executed
    out = cell(nb, "mlflow.MlflowClient(result.tracking_uri)").stdout
    assert "local-structure FINISHED" in out
    assert "'algorithm.max_steps': '2'" in out
    assert (cwd / ".sarl" / "mlflow.db").is_file()


def test_nothing_is_written_next_to_the_notebook(executed: tuple[NotebookNode, Path]) -> None:
    assert not (NOTEBOOKS / ".sarl").exists()
    assert not (NOTEBOOKS / "out").exists()
