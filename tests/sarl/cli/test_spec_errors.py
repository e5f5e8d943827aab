"""Spec errors of the real CLI: one ``error:`` line, exit 2, naming the field, the closest valid
name and the fix — a document of the other kind names the command for it, a typo the name it
missed, a spec the cluster backend refuses the setting that makes it run. ``--set KEY=VALUE``
edits the document for ``run``, ``validate`` and ``submit``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sarl.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EXPERIMENT = EXAMPLES / "local-structure.yaml"
STUDY = EXAMPLES / "studies" / "local-demo.yaml"


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def one_error(code: int, err: str) -> str:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize("local", [["--local"], []])
def test_run_of_a_study_names_sarl_study_run(local: list[str]) -> None:
    code, _, err = invoke("run", str(STUDY), *local)
    assert one_error(code, err) == (
        f"error: {STUDY}: kind='Study': a Study runs with `sarl study run {STUDY} --local` (its "
        "arms x seeds here), or `sarl submit` on a cluster"
    )


def test_study_run_of_an_experiment_names_sarl_run() -> None:
    code, _, err = invoke("study", "run", str(EXPERIMENT), "--local")
    assert one_error(code, err) == (
        f"error: {EXPERIMENT}: kind='Experiment': an Experiment runs with `sarl run {EXPERIMENT} "
        "--local` (or `sarl submit` on a cluster); a Study has kind: Study"
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"reward": [{"name": "structur"}]},
            "spec.reward[0].name='structur': unknown reward; did you mean 'structure'?",
        ),
        (
            {"reward": [{"name": "structure", "wieght": 1}]},
            "spec.reward[0].wieght: unknown field; did you mean 'weight'?",
        ),
        ({"algorithm": {"name": "grp"}}, "spec.algorithm.name='grp': Input should be 'grpo',"),
        ({"preset": "paper-grpo-mth"}, "spec.preset='paper-grpo-mth': unknown preset; did you"),
    ],
)
def test_validate_names_the_field_and_the_closest_name(
    tmp_path: Path, edit: dict[str, object], message: str
) -> None:
    doc = yaml.safe_load(EXPERIMENT.read_text())
    doc["spec"].update(edit)
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = invoke("validate", str(path))
    assert one_error(code, err).startswith(f"error: {path}: {message}")


def test_validate_with_sets_prints_the_edited_spec() -> None:
    code, out, err = invoke(
        "validate",
        str(EXPERIMENT),
        "--set",
        "spec.algorithm.max_steps=5",
        "--set",
        "spec.reward[1]={name: ground_truth, weight: 0}",
    )
    assert code == 0, err
    spec = yaml.safe_load(out)["spec"]
    assert spec["algorithm"]["max_steps"] == 5
    assert [(t["name"], t["weight"]) for t in spec["reward"]] == [
        ("structure", 1.0),
        ("ground_truth", 0.0),
    ]
    assert yaml.safe_load(EXPERIMENT.read_text())["spec"].get("algorithm") is None  # file as is


def test_validate_with_sets_edits_a_study() -> None:
    code, out, err = invoke("validate", str(STUDY), "--set", "spec.base.algorithm.max_steps=3")
    assert code == 0, err
    runs = [d for d in yaml.safe_load_all(out) if d]
    assert len(runs) == 4 and {d["spec"]["algorithm"]["max_steps"] for d in runs} == {3}


@pytest.mark.parametrize("command", ["run", "validate", "submit"])
def test_an_unknown_set_path_names_the_closest_key(command: str) -> None:
    code, _, err = invoke(command, str(EXPERIMENT), "--set", "spec.algorithm.max_step=5")
    assert one_error(code, err) == (
        "error: --set spec.algorithm.max_step: spec.algorithm has no field 'max_step'; did you "
        "mean 'max_steps'?"
    )


def test_run_with_sets_validates_the_edited_document() -> None:
    code, _, err = invoke("run", str(EXPERIMENT), "--set", "spec.algorithm.max_steps=0")
    assert one_error(code, err).startswith(
        f"error: {EXPERIMENT}: spec.algorithm.max_steps=0: Input should be greater than or equal"
    )


def test_submit_of_the_local_demo_checks_each_backend_before_the_cluster(tmp_path: Path) -> None:
    """The demo's arms train one reward and log the other (weight 0): verl (the default backend)
    takes that, and refuses a reward in two terms naming the fix; on TRL the batch layout is
    refused naming the fix. Every check comes before any cluster is contacted (no kubeconfig)."""
    env = {"KUBECONFIG": str(tmp_path / "none")}
    code, _, err = invoke("submit", str(STUDY), env=env)
    assert code == 1 and "no kubeconfig found" in err  # the spec passed; the cluster is next
    code, _, err = invoke(
        "submit", str(STUDY), "--set", "spec.arms[1].override.reward[1].name=structure", env=env
    )
    message = one_error(code, err)
    assert message.startswith(
        f"error: {STUDY}: spec.arms[1] (structure, seed 0): spec.reward[1].name='structure': "
        "reward 'structure' is already spec.reward[0]; on the verl trainer each reward may "
        "appear once"
    )
    assert "spec.base.<field>" in message  # where a Study sets the run's field
    code, _, err = invoke("submit", str(STUDY), "--set", "spec.base.resources.backend=trl", env=env)
    assert "set spec.algorithm.micro_batch_size_per_gpu: 8" in one_error(code, err)
    sets = ["--set", "spec.base.resources.backend=trl"]
    sets += ["--set", "spec.base.algorithm.micro_batch_size_per_gpu=8"]
    code, _, err = invoke("submit", str(STUDY), *sets, env=env)
    assert code == 1 and "no kubeconfig found" in err  # the spec passed; the cluster is next
