"""``sarl run --local`` says what it is doing before its first bar moves: one stderr line while
the built-in policy is prepared (warm start) and one before the step-0 evaluation; a real run of
the real command, edited with ``--set``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.sarl.cli.conftest import RunCli

pytest.importorskip("trl")
pytestmark = pytest.mark.slow

TINY = {
    "apiVersion": "sarl.dev/v1alpha1",
    "kind": "Experiment",
    "metadata": {"name": "status-lines"},
    "spec": {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 10}},
        "data": {"train_size": 8, "eval_size": 2, "difficulty": 2},
        "algorithm": {
            "rollouts_per_prompt": 2,
            "train_batch_size": 2,
            "mini_batch_size": 2,
            "max_response_length": 24,
            "max_steps": 50,  # cut to 1 with --set below
        },
        "evaluation": {"k": 1, "max_problems": 2},
        "reward": [{"name": "ground_truth"}],
    },
}


def test_status_lines_before_the_first_step(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    workdir = tmp_path / "state"
    proc = run_cli(
        "run",
        str(path),
        "--local",
        "--workdir",
        str(workdir),
        "--set",
        "spec.algorithm.max_steps=1",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    preparing = lines.index(
        f"status-lines: preparing the built-in policy (warm start on first use, cached under "
        f"{workdir / 'cache'})…"
    )
    evaluating = lines.index(
        "status-lines: step-0 evaluation of 2 held-out problems (k=1), before any RL update…"
    )
    first_bar = next(i for i, line in enumerate(lines) if line.startswith("training"))
    assert preparing < evaluating < first_bar
    assert "status-lines: 1 steps" in proc.stdout  # --set reached the run
