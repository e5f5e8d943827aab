"""Screenshots of a sarl Study in MLflow's UI, taken as a person sees it (headless Chromium).

Run it from the repository root::

    .venv/bin/python -m tests.browser.mlflow_screenshots --out out/mlflow-ui     # ~3 min
    .venv/bin/python -m tests.browser.mlflow_screenshots --store .sarl           # after make demo
    .venv/bin/python -m tests.browser.mlflow_screenshots --synthetic             # ~30 s

It starts a real ``mlflow server`` on a SQLite store in a temporary folder and fills it:

- default: trains a tiny Study (2 arms x 2 seeds x 4 steps of GRPO on CPU) with
  ``sarl.study.runner.run_study``, tracking to that server, as ``sarl study run`` does;
- ``--store DIR``: a copy of ``DIR/mlflow.db`` (e.g. ``.sarl`` after ``make demo``; artifacts
  are read where the store's runs keep them, the store itself is not touched);
- ``--synthetic``: the Study's MLflow runs as the runners create them (parent run, one nested run
  per arm x seed with its params, tags and description), with made-up metric curves and no
  training (:func:`log_study_runs`; used by ``tests/browser/test_mlflow_ui.py``).

Then a fresh headless Chromium (nothing remembered, as on a first visit; :mod:`tests.browser.cdp`)
opens the pages and clicks where docs/getting-started/report-and-mlflow.md says to click,
writing into ``--out``:

1. ``01-experiment-link.png``: the experiment's plain link, as the experiment list opens it;
2. ``02-runs.png``: the link sarl prints (``?workflowType=machine_learning``): the Runs table;
3. ``03-runs-grouped-by-arm.png``: after Group by → arm;
4. ``04-charts-by-arm.png``: the chart view of those groups (one line per arm, min-max band);
5. ``05-arm-run.png``: one arm x seed run's page (description, params ``arm`` and ``seed``);
6. ``06-arm-run-map.png``: the run's first reasoning map (Artifacts → maps → step-000000).

Each screenshot's page text is printed with it (first lines), so a log shows what was on screen.
Needs ``chromium`` (Debian: ``apt-get install chromium``) and the ``sarl[dev]`` environment.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sarl.spec.loader import load_study
from sarl.spec.study import TAG_ARM, Study
from sarl.tracking.describe import ui_url
from tests.browser.cdp import Page, headless_chromium
from tests.support.mlflow_server import MlflowServer, running_mlflow_server

#: A Study small enough to train on a CPU in a few minutes, shaped as examples/studies/local-demo.
TINY_STUDY: dict[str, Any] = {
    "apiVersion": "sarl.dev/v1alpha1",
    "kind": "Study",
    "metadata": {"name": "ui-demo"},
    "spec": {
        "base": {
            "preset": "local-grpo-arithmetic",
            "model": {"warm_start": {"steps": 40}},
            "data": {"train_size": 16, "eval_size": 4, "difficulty": 2},
            "algorithm": {
                "rollouts_per_prompt": 2,
                "train_batch_size": 2,
                "mini_batch_size": 2,
                "max_response_length": 48,
                "max_steps": 4,
                "learning_rate": 1e-3,
            },
            "evaluation": {"k": 2, "every_n_steps": 2, "max_problems": 4},
            "tracking": {"log_maps_every_n_steps": 2},
            "storage": {"every_n_steps": 4},
        },
        "arms": [
            {
                "name": "ground-truth",
                "description": "GRPO on the ground-truth answer reward.",
                "override": {
                    "reward": [
                        {"name": "ground_truth", "weight": 1.0},
                        {"name": "structure", "weight": 0.0, "settings": {"workers": 1}},
                    ]
                },
            },
            {
                "name": "structure",
                "description": "GRPO on the structure reward alone.",
                "override": {
                    "reward": [
                        {"name": "structure", "weight": 1.0, "settings": {"workers": 1}},
                        {"name": "ground_truth", "weight": 0.0},
                    ]
                },
            },
        ],
        "reference": "ground-truth",
        "seeds": [0, 1],
        "parallelism": 1,
    },
}


@dataclass(frozen=True)
class StudyInStore:
    """Where the Study is in the server: its MLflow experiment and one arm x seed run."""

    experiment_id: str
    arm_run_id: str
    study: str


def log_study_runs(uri: str, study: Study, spools: Path, steps: int = 8) -> StudyInStore:
    """The Study's MLflow runs as the runners create them, without training: the parent run
    (:func:`sarl.study.runner.open_parent_run`) and each arm x seed run with the tags, params
    and description the local runner gives it (:meth:`Tracker.start_experiment`), then
    made-up curves (``reward/mean``, ``structure/score``, ``eval/heldout/avg_at_4``); their
    tracking spools under ``spools``."""
    from sarl.study.runner import open_parent_run
    from sarl.tracking.tracker import Tracker

    parent = open_parent_run(study, uri, spools / "study")
    run_id = ""
    for i, run in enumerate(study.runs(parent.run_id)):
        tracker = Tracker.start_experiment(
            uri, run.experiment, backend="local-trl", spool_root=spools / "runs"
        )
        lift = 0.05 * (i % 2) + 0.01 * run.seed  # arms (and seeds) apart, so groups show
        for step in range(steps + 1):
            tracker.log_metrics(
                {
                    "reward/mean": 0.2 + lift + 0.5 * (1 - math.exp(-step / 3)),
                    "structure/score": 0.3 + lift * 3 + 0.02 * step,
                    "eval/heldout/avg_at_4": 0.1 + lift + 0.03 * step,
                },
                step=step,
            )
        tracker.finish()
        run_id = run_id or tracker.run_id
    parent.finish()
    return StudyInStore(parent.experiment_id, run_id, study.name)


def train_tiny_study(uri: str, workdir: Path) -> StudyInStore:
    """Train :data:`TINY_STUDY` here, tracking to ``uri``, as ``sarl study run`` does."""
    from sarl.study.runner import StudyOptions, run_study

    options = StudyOptions(
        workdir=workdir / ".sarl", tracking_uri=uri, progress=False, out_dir=workdir / "out"
    )
    result = run_study(load_study(TINY_STUDY), options)
    if result.failed:
        raise RuntimeError(f"the tiny Study failed: {[o.error for o in result.failed]}")
    return _found(uri, result.study)


def _found(uri: str, study: str | None = None) -> StudyInStore:
    """The newest Study (parent run tagged ``sarl.role=study``) in the store at ``uri``."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    role = "tags.`sarl.role` = 'study'" + (f" and tags.`sarl.study` = '{study}'" if study else "")
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = client.search_runs(experiments, role, order_by=["attributes.start_time DESC"])
    if not parents:
        raise LookupError(f"no Study in the store at {uri}")
    parent = parents[0]
    children = client.search_runs(
        [parent.info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
        order_by=["attributes.start_time ASC"],
    )
    if not children:
        raise LookupError(f"Study {parent.info.run_name!r} has no arm x seed runs")
    return StudyInStore(
        parent.info.experiment_id, children[0].info.run_id, parent.data.tags["sarl.study"]
    )


@contextlib.contextmanager
def serving(store: Path | None, tmp: Path) -> Iterator[MlflowServer]:
    """A real ``mlflow server`` on an empty store in ``tmp``, or on a copy of ``store``."""
    tmp.mkdir(parents=True, exist_ok=True)
    if store is not None:
        source = store / "mlflow.db"
        if not source.is_file():
            raise FileNotFoundError(f"{source} does not exist (run make demo first?)")
        with sqlite3.connect(source) as src, sqlite3.connect(tmp / "mlflow.db") as dst:
            src.backup(dst)  # a consistent copy even while a run writes the store
    with running_mlflow_server(tmp) as server:
        yield server


def _settle(page: Page, seconds: float = 2.5) -> None:
    # The UI keeps fetching and laying out after its text appears (charts, fonts).
    time.sleep(seconds)


def _shot(page: Page, out: Path, name: str) -> Path:
    path = page.screenshot(out / name)
    lines = [line for line in page.text().splitlines() if line.strip()]
    # The sidebar's text comes first and ends with "Settings"; the page's own follows.
    main = lines[lines.index("Settings") + 1 :] if "Settings" in lines else lines
    print(f"{path}:\n    " + " | ".join(main[:16]))
    return path


def close_assistant(page: Page) -> None:
    """The MLflow Assistant side panel takes a third of the screen; a person closes it."""
    with contextlib.suppress(LookupError):
        page.click("document.querySelector('button[aria-label=Close]')", "the assistant")
        _settle(page, 1)


def group_by_arm(page: Page, tries: int = 3) -> None:
    """Group by → arm in the runs table, as a person does: open the menu, tick ``arm``, close
    the menu. A click that lands while the page still moves (a description or a panel
    appearing) is lost, so each click is checked and tried again."""
    menu = "document.querySelector('[role=menuitemcheckbox]')"
    for _ in range(tries):
        if not page.evaluate(f"!!{menu}"):
            page.click_text("Group by")
        with contextlib.suppress(TimeoutError):
            page.wait_for(menu, 5, "the Group by menu")
            _settle(page, 1)  # the menu slides in; a click before it stops lands beside it
            page.click_text(TAG_ARM, "[role=menuitemcheckbox]")
            page.wait_for_text("Group: ", 10)
            page.call("Input.dispatchKeyEvent", type="keyDown", key="Escape")
            return
    raise TimeoutError(f"Group by → arm did not take; the page shows:\n{page.text()}")


def take_screenshots(page: Page, base: str, found: StudyInStore, out: Path) -> list[Path]:
    """The screenshots listed in the module docstring, in order."""
    shots = []
    page.goto(f"{base}/#/experiments/{found.experiment_id}")
    page.wait_for_text(found.study)
    _settle(page)
    shots.append(_shot(page, out, "01-experiment-link.png"))

    page.goto(ui_url(base, found.experiment_id))
    page.wait_for_text("Group by")
    _settle(page)
    close_assistant(page)
    shots.append(_shot(page, out, "02-runs.png"))

    group_by_arm(page)
    _settle(page)
    shots.append(_shot(page, out, "03-runs-grouped-by-arm.png"))

    page.click("document.querySelector('input[value=CHART]').closest('label')", "chart view")
    page.wait_for("document.querySelectorAll('.js-plotly-plot, canvas, svg.main-svg').length")
    _settle(page, 4)
    shots.append(_shot(page, out, "04-charts-by-arm.png"))

    page.goto(ui_url(base, found.experiment_id, found.arm_run_id))
    page.wait_for_text("Parameters")
    _settle(page)
    close_assistant(page)
    shots.append(_shot(page, out, "05-arm-run.png"))

    close_assistant(page)
    page.click_label("Artifacts")
    with contextlib.suppress(LookupError, TimeoutError):  # a run without maps: the tree only
        page.wait_for_text("maps", 20)
        _settle(page, 1)
        page.click_label("maps")
        page.wait_for_text("step-0", 20)
        _settle(page, 1)
        # The first step with maps: step 0 where maps are drawn before RL (older runs: later).
        first = min(line for line in page.text().splitlines() if line.startswith("step-0"))
        page.click_label(first)
        page.wait_for_text("sample-0.png", 20)
        _settle(page, 1)
        page.click_label("sample-0.png")
        page.wait_for("Array.from(document.images).some(i => i.naturalWidth > 300)", 30)
    _settle(page)
    shots.append(_shot(page, out, "06-arm-run-map.png"))
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/mlflow-ui"))
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--store", type=Path, help="folder holding mlflow.db (e.g. .sarl)")
    what.add_argument("--synthetic", action="store_true", help="runs without training")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="sarl-mlflow-ui-"))
    try:
        with serving(args.store, tmp / "server") as server:
            if args.store is not None:
                found = _found(server.url)
            elif args.synthetic:
                found = log_study_runs(server.url, load_study(TINY_STUDY), tmp / "spools")
            else:
                found = train_tiny_study(server.url, tmp / "work")
            with headless_chromium() as page:
                take_screenshots(page, server.url, found, args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
