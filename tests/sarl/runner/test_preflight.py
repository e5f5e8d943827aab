"""Bad input fails before any training starts: one line naming what is wrong, exit code 2.

Runs the real ``sarl run --local`` command; every case must fail fast (no warm start, no model).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

SDK_SRC = Path(__file__).resolve().parents[3] / "sdk" / "src"


def run_cli(
    tmp_path: Path, spec: dict[str, object], *args: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "exp.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "sarl.dev/v1alpha1",
                "kind": "Experiment",
                "metadata": {"name": "bad"},
                "spec": spec,
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(SDK_SRC),
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sarl.cli.main",
            "run",
            str(path),
            "--local",
            "--workdir",
            str(tmp_path / "w"),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("spec", "args", "message"),
    [
        (
            {"preset": "local-grpo-arithmetic", "algorithm": {"name": "ppo"}},
            [],
            "PPO (GAE + critic) runs on the verl backend",
        ),
        ({"reward": [{"name": "nope"}]}, [], "spec.reward[0].name='nope': unknown reward"),
        ({"algorithm": {"learning_rate": -1}}, [], "spec.algorithm.learning_rate=-1"),
        (
            {"data": {"task": "dataset", "dataset": "/no/such.jsonl"}},
            [],
            "spec.data.dataset='/no/such.jsonl': no such file",
        ),
        (
            {"model": {"name": "/no/such/model"}},
            [],
            "spec.model.name='/no/such/model': no such directory",
        ),
        (  # a flag's value is reported under the flag's name, a spec's under the field's
            {"preset": "local-grpo-arithmetic"},
            ["--tracking-uri", "http://127.0.0.1:9"],
            "error: --tracking-uri: cannot reach MLflow at http://127.0.0.1:9",
        ),
        (
            {"preset": "local-grpo-arithmetic", "tracking": {"mlflow_uri": "http://127.0.0.1:9"}},
            [],
            "error: tracking.mlflow_uri: cannot reach MLflow at http://127.0.0.1:9",
        ),
        (
            {
                "preset": "local-grpo-arithmetic",
                "storage": {
                    "checkpoint_uri": "s3://missing-bucket/x",
                    "endpoint_url": "http://127.0.0.1:9",
                },
            },
            [],
            "checkpoint_uri",
        ),
    ],
)
def test_bad_experiment_fails_fast_with_one_line(
    tmp_path: Path, spec: dict[str, object], args: list[str], message: str
) -> None:
    start = time.monotonic()
    proc = run_cli(tmp_path, spec, *args)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert message in lines[0]
    assert time.monotonic() - start < 60
    assert not (tmp_path / "w" / "cache").exists()  # nothing was built


def test_missing_bucket_on_a_real_s3_server(tmp_path: Path, s3_endpoint: str) -> None:
    proc = run_cli(
        tmp_path,
        {
            "preset": "local-grpo-arithmetic",
            "storage": {"checkpoint_uri": "s3://no-such-bucket/x", "endpoint_url": s3_endpoint},
        },
    )
    assert proc.returncode == 2
    assert "bucket 'no-such-bucket' does not exist" in proc.stderr
