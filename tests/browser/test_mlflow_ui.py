"""A Study in MLflow's real UI, read by a real (headless) browser: the link sarl prints opens the
model-training layout with the experiment's description; Group by → arm shows one group per arm;
an arm's run page shows its description. Skipped where no Chromium is installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sarl.spec.loader import load_study
from sarl.tracking.describe import ui_url
from tests.browser.cdp import Page, find_chromium, headless_chromium
from tests.browser.mlflow_screenshots import (
    TINY_STUDY,
    StudyInStore,
    close_assistant,
    group_by_arm,
    log_study_runs,
    serving,
)

pytest.importorskip("mlflow")
pytest.importorskip("websocket")
if find_chromium() is None:
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium)", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, StudyInStore, Page]]:
    root = tmp_path_factory.mktemp("mlflow-ui")
    with serving(None, root) as server:
        found = log_study_runs(server.url, load_study(TINY_STUDY), root / "spools")
        with headless_chromium() as page:
            yield server.url, found, page


def test_the_printed_link_opens_the_runs_with_where_to_click(
    ui: tuple[str, StudyInStore, Page],
) -> None:
    base, found, page = ui
    page.goto(ui_url(base, found.experiment_id))
    page.wait_for_text("Group by")
    page.wait_for_text("See the arms:")  # the experiment's description, above the table
    text = page.text()
    assert "Model training" in text and "Detect Issues" not in text
    assert found.study in text


def test_the_plain_link_still_opens_genai_in_mlflow_3_17(
    ui: tuple[str, StudyInStore, Page],
) -> None:
    """MLflow 3.17.2 ignores the experiment-kind tag for the layout (a global switch decides,
    GenAI by default): why sarl's links carry ``workflowType``. If this fails, MLflow honours
    the tag now and the "click Model training" step of
    docs/getting-started/report-and-mlflow.md can go."""
    base, found, page = ui
    page.goto(f"{base}/#/experiments/{found.experiment_id}")
    page.wait_for_text("Overview")
    assert "Evaluation runs" in page.text()


def test_group_by_arm_shows_one_group_per_arm(ui: tuple[str, StudyInStore, Page]) -> None:
    base, found, page = ui
    page.goto(ui_url(base, found.experiment_id))
    page.wait_for_text("Group by")
    close_assistant(page)
    group_by_arm(page)
    page.wait_for_text("Group: structure")
    assert "Group: ground-t" in page.text()  # the name is cut to the column's width


def test_an_arm_run_shows_its_description_and_params(ui: tuple[str, StudyInStore, Page]) -> None:
    base, found, page = ui
    page.goto(ui_url(base, found.experiment_id, found.arm_run_id))
    page.wait_for_text("Parameters")
    page.wait_for_text("Arm ground-truth, seed 0 of Study 'ui-demo'.")
    page.click("document.querySelector('input[placeholder=\"Search parameters\"]')", "search")
    page.call("Input.insertText", text="seed")
    page.wait_for_text("algorithm.seed")
    assert "\nseed\t0" in page.text() or "seed\n0" in page.text()
