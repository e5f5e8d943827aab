"""``sarl compare`` on a Study: a real SQLite MLflow store holding a Study's parent run and its
arm x seed runs (two arms x two seeds, tagged as the Study runner tags them), logged twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from mlflow import MlflowClient
from typer.testing import CliRunner

from sarl.cli.compare import compare_command
from sarl.spec.study import Study
from sarl.tracking.compare import compare_runs
from sarl.tracking.tracker import Tracker, TrackingError
from sarl.viz.curves import THICK_LW, THIN_LW
from tests.sarl.study.conftest import ARMS, SEEDS, log_study, make_study


class Store:
    """The store: ``study`` logged twice (``old_parent``, then ``parent``), and a lone run."""

    def __init__(self, root: Path) -> None:
        self.uri = f"sqlite:///{root / 'mlflow.db'}"
        self.study: Study = make_study("demo-study")
        self.old_parent = log_study(self.uri, self.study)
        self.parent = log_study(self.uri, self.study)
        # The Study runner logs the document's arm order on the parent: gt before sarl here,
        # the reverse of the order the runs started in.
        client = MlflowClient(self.uri)
        for i, arm in enumerate(reversed(ARMS)):
            client.log_param(self.parent, f"arms.{i}", arm)
        lone = Tracker.start(self.uri, "other-experiment", "lone-run", spec_yaml="")
        lone.log_metrics({"accuracy": 0.5}, step=1)
        lone.finish()
        self.lone = lone.run_id

    def children(self, parent: str) -> dict[tuple[str, int], str]:
        runs = MlflowClient(self.uri).search_runs(
            [MlflowClient(self.uri).get_experiment_by_name(self.study.name).experiment_id],
            f"tags.`mlflow.parentRunId` = '{parent}'",
        )
        return {(r.data.tags["arm"], int(r.data.tags["seed"])): r.info.run_id for r in runs}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store(tmp_path_factory.mktemp("compare-study"))


def test_an_experiment_is_its_arm_runs_without_the_parent(store: Store) -> None:
    comparison = compare_runs(store.uri, experiments=[store.study.name])
    ids = {r.run_id for r in comparison.runs}
    assert ids == {
        *store.children(store.old_parent).values(),
        *store.children(store.parent).values(),
    }
    assert not any(key.startswith("arms.") for key in comparison.differing_params)
    assert {r.experiment for r in comparison.runs} == {store.study.name}  # the name, not an id


def test_latest_is_the_newest_study_s_runs(store: Store) -> None:
    comparison = compare_runs(store.uri, experiments=[store.study.name], latest=True)
    newest = store.children(store.parent)
    # grouped by arm in the document's order (gt first, from the parent's params), then seed
    assert [(r.arm, r.seed) for r in comparison.runs] == [
        (arm, seed) for arm in reversed(ARMS) for seed in SEEDS
    ]
    assert [r.run_id for r in comparison.runs] == [
        newest[(arm, seed)] for arm in reversed(ARMS) for seed in SEEDS
    ]
    assert comparison.groups == {
        arm: tuple(newest[(arm, seed)] for seed in SEEDS) for arm in reversed(ARMS)
    }


def test_two_parents_of_one_study_are_told_apart(store: Store) -> None:
    groups = compare_runs(store.uri, experiments=[store.study.name]).groups
    name = store.study.name
    assert set(groups) == {
        f"{name} ({parent[:8]})/{arm}"
        for parent in (store.old_parent, store.parent)
        for arm in ARMS
    }
    assert all(len(ids) == len(SEEDS) for ids in groups.values())


@pytest.mark.parametrize("how", ["study name", "parent run id"])
def test_a_study_is_named_by_its_name_or_parent(store: Store, how: str) -> None:
    value = store.study.name if how == "study name" else store.parent
    comparison = compare_runs(store.uri, run_ids=[value])
    assert {r.run_id for r in comparison.runs} == set(store.children(store.parent).values())


def test_runs_are_named_by_name_or_id(store: Store) -> None:
    newest = store.children(store.parent)
    names = [f"{store.study.name}-{ARMS[0]}-s0", newest[(ARMS[1], 1)], "lone-run"]
    comparison = compare_runs(store.uri, run_ids=names)
    # the two Study runs together, in the Study's arm order (gt first), then the lone run
    assert [r.run_id for r in comparison.runs] == [
        newest[(ARMS[1], 1)],
        newest[(ARMS[0], 0)],
        store.lone,
    ]
    assert [r.experiment for r in comparison.runs][-1] == "other-experiment"


def test_an_unknown_name_lists_the_known_ones(store: Store) -> None:
    with pytest.raises(TrackingError) as info:
        compare_runs(store.uri, run_ids=["local-demo-structure-s0"], experiments=["nope"])
    message = str(info.value)
    assert message.startswith(  # newest first
        f"unknown run 'local-demo-structure-s0', experiment 'nope' at {store.uri}; known "
        f"experiments: other-experiment, {store.study.name}; Studies: {store.study.name}; "
        f"runs: lone-run, {store.study.name}-"
    )
    assert "\n" not in message


def test_the_figure_draws_seeds_thin_and_each_arm_s_mean_thick(store: Store) -> None:
    fig = compare_runs(store.uri, run_ids=[store.study.name]).figure()
    accuracy = next(ax for ax in fig.axes if ax.get_title() == "accuracy")
    widths = sorted(line.get_linewidth() for line in accuracy.lines)
    assert widths == [THIN_LW] * (len(ARMS) * len(SEEDS)) + [THICK_LW] * len(ARMS)
    colours = {line.get_color() for line in accuracy.lines}
    assert len(colours) == len(ARMS)  # one colour per arm, its seeds included
    assert accuracy.get_ylabel() == "training accuracy (share correct)"
    assert accuracy.get_xlabel() == "training step"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [f"{arm} (2 seeds)" for arm in reversed(ARMS)] + ["one seed"]
    assert "2 arms" in fig._suptitle.get_text()


def test_cli_compares_a_study_by_name(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    app = typer.Typer()
    app.command("compare")(compare_command)
    app.callback()(lambda: None)
    out = tmp_path / "c.png"
    args = ["compare", store.study.name, "--tracking-uri", store.uri, "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Comparison of 4 runs" in result.stdout
    row = next(line for line in result.stdout.splitlines() if f"{store.study.name}-gt-s0" in line)
    assert (
        f"│ {store.study.name} " in row and "│ gt " in row and "│ 0 " in row
    )  # experiment, arm, seed
    assert out.read_bytes().startswith(b"\x89PNG")
