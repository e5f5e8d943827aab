"""``sarl plan``: the table, the JSON, the exit codes, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.sarl.cli.conftest import RunCli

ROOT = Path(__file__).resolve().parents[3]
PAPER_STUDY = str(ROOT / "examples" / "studies" / "sarl-math.yaml")


def test_the_paper_study_fits_an_h100_node(run_cli: RunCli) -> None:
    done = run_cli("plan", PAPER_STUDY)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Resource plan of Study sarl-math: 18 runs, 2 at once" in out
    for arm in ("grpo-ground-truth", "grpo-sarl", "ppo-ground-truth", "ppo-sarl", "ttrl", "empo"):
        line = next(line for line in out.splitlines() if line.startswith(arm))
        assert line.rstrip().endswith("yes"), line
    assert "Fits: every check passes." in out and "Assumptions:" in out


def test_the_bundled_store_is_refused_naming_the_field(run_cli: RunCli) -> None:
    done = run_cli("plan", PAPER_STUDY, "--store-capacity", "20Gi")
    assert done.returncode == 1
    assert "spec.base.storage.checkpoint_uri" in done.stdout and "has 20.0 GiB" in done.stdout


def test_todays_preset_is_refused_with_its_numbers(run_cli: RunCli) -> None:
    done = run_cli("plan", PAPER_STUDY, "--set", "spec.base.algorithm.max_tokens_per_gpu=null")
    assert done.returncode == 1
    assert "NO: spec.algorithm.micro_batch_size_per_gpu" in done.stdout
    assert "needs 349.2 GiB, has 72.0 GiB" in done.stdout


def test_json_carries_every_check(run_cli: RunCli, tmp_path: Path) -> None:
    spec = tmp_path / "exp.yaml"
    spec.write_text(
        "apiVersion: sarl.dev/v1alpha1\nkind: Experiment\nmetadata: {name: one}\n"
        "spec: {preset: paper-ppo-math}\n"
    )
    done = run_cli("plan", str(spec), "--json", "--train-rows", "512")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["fits"] is True and plan["steps"] == 30  # 15 epochs x 512 // 256
    fields = {c["field"] for c in plan["checks"]}
    assert "spec.resources.scratch_size" in fields and "spec.storage.checkpoint_uri" in fields
    names = [t["name"] for t in plan["phases"][0]["terms"]]
    assert any(n.startswith("critic") for n in names)


def test_bad_input_is_one_line_naming_the_option(run_cli: RunCli) -> None:
    done = run_cli("plan", PAPER_STUDY, "--store-capacity", "lots")
    assert done.returncode == 2
    assert done.stderr.startswith("error: --store-capacity:") and "Traceback" not in done.stderr
