"""Every example Study passes every check ``sarl submit`` runs before it contacts the cluster, for
each arm x seed: the Study's own validation, then each run's Experiment validated as the operator
will and accepted by its trainer (``sarl.integrations.cluster.check_cluster``: the verl or TRL
mapping the job runs, child names short enough for Kubernetes). Weight-0 reward terms (logged,
not trained on) and weighted sums are what the Studies compare rewards with, on either backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.cluster.client import load_study_for_cluster

STUDIES = sorted((Path(__file__).resolve().parents[2] / "examples" / "studies").glob("*.yaml"))


def test_the_demo_and_the_paper_study_are_examples() -> None:
    assert {"local-demo", "sarl-math"} <= {p.stem for p in STUDIES}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_run_passes_the_submit_checks(path: Path) -> None:
    study, _ = load_study_for_cluster(path)  # raises naming the first arm and seed refused
    checked = {(run.arm, run.seed) for run in study.runs()}
    assert checked == {(arm.name, seed) for arm in study.spec.arms for seed in study.spec.seeds}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_sarl_submit_gets_as_far_as_the_cluster(path: Path, tmp_path: Path) -> None:
    """With no kubeconfig, the first thing ``sarl submit`` cannot do is reach the cluster."""
    env = {"KUBECONFIG": str(tmp_path / "none")}
    result = CliRunner().invoke(app, ["submit", str(path)], env=env)
    assert result.exit_code == 1, result.stderr
    assert "no kubeconfig found" in result.stderr
