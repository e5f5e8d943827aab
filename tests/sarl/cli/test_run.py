"""``sarl run`` without ``--local`` points to ``sarl submit``; ``sarl validate`` on Experiments
and Studies."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from sarl.cli.main import app

EXAMPLE = Path(__file__).parents[3] / "examples" / "sarl-grpo-math.yaml"


def test_run_without_local_names_the_submit_command(tmp_path: Path) -> None:
    """With a cluster configured (a kubeconfig file; without one `sarl run` trains here:
    tests/sarl/cli/test_run_where.py)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = {"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": ""}
    result = CliRunner().invoke(app, ["run", str(EXAMPLE)], env=env)
    assert result.exit_code == 2
    assert f"sarl submit {EXAMPLE}" in result.output and "--local" in result.output


STUDY = Path(__file__).resolve().parents[3] / "examples" / "studies" / "sarl-math.yaml"


def test_validate_prints_every_arm_and_seed_of_a_study() -> None:
    import yaml

    result = CliRunner().invoke(app, ["validate", str(STUDY)])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    names = [d["metadata"]["name"] for d in docs if d]
    assert len(names) == 18
    assert "sarl-math-grpo-sarl-s2" in names


def test_validate_study_error_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(STUDY.read_text().replace("seeds: [0, 1, 2]", "seeds: [0, 0]"))
    result = CliRunner().invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "spec.seeds=[0, 0]: duplicate seeds [0]" in result.output


def test_study_run_without_local_names_the_submit_command(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"  # a cluster configured, as above
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = {"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": ""}
    result = CliRunner().invoke(app, ["study", "run", str(STUDY)], env=env)
    assert result.exit_code == 2
    assert "sarl submit" in result.output and "--local" in result.output
