"""An MLflow outage longer than every retry budget neither stops a local run nor loses a metric
(issue 27, item 1): the real MLflow server is SIGKILLed mid-run and restarted on the same port and
database; checkpoints made meanwhile carry the unsent metrics, so a resume on a machine that lost
the run's directory still logs every step exactly once.

The child is the real CLI (``sarl run --local``) with one patch (``CHILD``): after logging the
metrics of each step in ``STALL_STEPS`` it writes ``stalled-<step>`` and waits for ``go-<step>``,
so the parent kills and restarts the server at chosen steps, not at a race. Retry budgets are
made small through settings (MLflow's HTTP retries 0, the drainer's backoff 1 s, a warning per
failed try), and the outage lasts until the child has failed more times than the old tracker's
3 attempts (counted in its log lines), however long that takes on a busy machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

from tests.jobs.outage import OUTAGE_ENV, Server  # noqa: E402 - one restartable server

pytestmark = pytest.mark.slow

MAX_STEPS = 8
CHILD = """
import os, sys, time
from pathlib import Path

stalls = {int(s) for s in os.environ["STALL_STEPS"].split(",") if s}
where = Path(os.environ["STALL_DIR"])

from sarl.runner import callbacks
on_log = callbacks.MetricsCallback.on_log
def stalling_on_log(self, args, state, control, logs=None, **kw):
    on_log(self, args, state, control, logs=logs, **kw)
    step = state.global_step
    if step in stalls and logs and "reward" in logs:
        stalls.discard(step)
        (where / f"stalled-{step}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 900
        while not (where / f"go-{step}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
callbacks.MetricsCallback.on_log = stalling_on_log

from sarl.cli.main import main
sys.argv = ["sarl", *sys.argv[1:]]
main()
"""
# Small retry budgets: every failed send is one warning line ("not answering").
OLD_ATTEMPTS = 3  # the tracker before issue 27 stopped training after this many failed sends


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "mlflow")
    srv.start()
    yield srv
    srv.stop()


@dataclass
class Run:
    """One experiment run by the child CLI against ``server``."""

    spec: Path
    workdir: Path
    server: Server
    name: str
    stall_dir: Path

    def start(self, *flags: str, stalls: tuple[int, ...] = ()) -> subprocess.Popen[str]:
        env = {**os.environ, **OUTAGE_ENV, "SARL_NO_PROGRESS": "1"}
        env["STALL_STEPS"] = ",".join(map(str, stalls))
        env["STALL_DIR"] = str(self.stall_dir)
        cmd = [sys.executable, "-c", textwrap.dedent(CHILD), "run", str(self.spec), "--local"]
        cmd += ["--workdir", str(self.workdir), "--tracking-uri", self.server.url, *flags]
        tag = uuid.uuid4().hex[:6]
        out = (self.stall_dir / f"out-{tag}").open("w")
        err = (self.stall_dir / f"err-{tag}").open("w")
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        proc.out_path, proc.err_path = out.name, err.name  # type: ignore[attr-defined]
        return proc

    def wait_stalled(self, proc: subprocess.Popen[str], step: int) -> None:
        flag = self.stall_dir / f"stalled-{step}"
        deadline = time.monotonic() + 600  # the module's first run warm-starts the policy
        while not flag.exists():
            assert proc.poll() is None, f"run ended before step {step}: {_text(proc, 'err')}"
            assert time.monotonic() < deadline, f"run never reached step {step}"
            time.sleep(0.2)

    def wait_failures(self, proc: subprocess.Popen[str], count: int) -> None:
        """Until the child logged ``count`` failed sends (each try is a line, see OUTAGE_ENV)."""
        deadline = time.monotonic() + 600
        while _text(proc, "err").count("not answering") < count:
            assert proc.poll() is None, _text(proc, "err")
            assert time.monotonic() < deadline, "the drainer never retried"
            time.sleep(0.2)

    def go(self, step: int) -> None:
        (self.stall_dir / f"go-{step}").write_text("")

    def steps(self, run_id: str) -> dict[str, list[int]]:
        client = mlflow.MlflowClient(self.server.url)
        keys = client.get_run(run_id).data.metrics
        return {k: sorted(m.step for m in client.get_metric_history(run_id, k)) for k in keys}

    def only_run(self) -> Any:
        client = mlflow.MlflowClient(self.server.url)
        experiment = client.get_experiment_by_name(self.name)
        (run,) = client.search_runs([experiment.experiment_id])
        return run


def _text(proc: subprocess.Popen[str], which: str) -> str:
    return Path(getattr(proc, f"{which}_path")).read_text()


def _waiting(spool: Path) -> int:
    """Records in a spool folder not acknowledged yet (read without opening it: the run has it)."""
    acked = int((spool / "acked").read_text()) if (spool / "acked").exists() else 0
    lines = (spool / "records.jsonl").read_text().splitlines()
    return sum(1 for line in lines if json.loads(line)["pos"] > acked)


@pytest.fixture
def run(workdir: Path, server: Server, tmp_path: Path) -> Run:
    name = f"outage-{uuid.uuid4().hex[:6]}"
    doc = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "preset": "local-grpo-arithmetic",
            "model": {"warm_start": {"steps": 40}},
            "data": {"train_size": 16, "eval_size": 4, "difficulty": 2},
            "algorithm": {
                "rollouts_per_prompt": 2,
                "train_batch_size": 2,
                "mini_batch_size": 2,
                "max_response_length": 48,
                "max_steps": MAX_STEPS,
                "learning_rate": 1e-3,
            },
            "evaluation": {"k": 2, "every_n_steps": 4, "max_problems": 4},
            "tracking": {"log_maps_every_n_steps": 100},
            "storage": {"every_n_steps": 2},
            "reward": [{"name": "ground_truth", "weight": 1.0}],
        },
    }
    spec = workdir / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(doc))
    stall_dir = tmp_path / "stalls"
    stall_dir.mkdir()
    return Run(spec, workdir, server, name, stall_dir)


def _assert_every_step_once(run: Run) -> None:
    mlrun = run.only_run()
    assert mlrun.info.status == "FINISHED"
    steps = run.steps(mlrun.info.run_id)
    assert steps["reward/mean"] == list(range(1, MAX_STEPS + 1))
    assert steps["loss"] == list(range(1, MAX_STEPS + 1))
    assert steps["eval/heldout/pass_at_2"] == [0, 4, 8]
    assert {k: v for k, v in steps.items() if len(v) != len(set(v))} == {}  # each step once


def test_outage_longer_than_every_retry_budget_does_not_stop_training(run: Run) -> None:
    proc = run.start(stalls=(2, 6))
    run.wait_stalled(proc, 2)
    run.server.kill()
    run.go(2)
    run.wait_stalled(proc, 6)  # steps 3-6 trained (checkpoints 2 and 4 stored) with MLflow down
    run.wait_failures(proc, OLD_ATTEMPTS + 1)
    rundir = run.workdir / "runs" / run.name
    spool = rundir / "tracking" / json.loads((rundir / "run.json").read_text())["run_id"]
    assert _waiting(spool) > 0
    tail = run.workdir / "checkpoints" / run.name / "step-00000004" / "files"
    assert _waiting(tail / "sarl-tracking-spool") > 0  # the checkpoint carries the unsent tail
    run.server.start()
    run.go(6)
    assert proc.wait(timeout=900) == 0, _text(proc, "err")
    assert "still spooled" not in _text(proc, "out")
    assert "answers again" in _text(proc, "err")
    _assert_every_step_once(run)
    assert _waiting(spool) == 0


def test_resume_after_outage_on_another_machine_sends_the_checkpoint_tail(run: Run) -> None:
    proc = run.start(stalls=(2, 5))
    run.wait_stalled(proc, 2)
    run.server.kill()
    run.go(2)
    run.wait_stalled(proc, 5)  # the checkpoint of step 4 is stored, its metrics are not sent
    run.wait_failures(proc, OLD_ATTEMPTS + 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    # Another machine: the run's directory (its spool included) is gone; the store is not.
    shutil.rmtree(run.workdir / "runs" / run.name)
    run.server.start()

    resumed = run.start("--resume")
    assert resumed.wait(timeout=900) == 0, _text(resumed, "err")
    assert "resumed from step 4" in " ".join(_text(resumed, "out").split())  # rich wraps
    _assert_every_step_once(run)
