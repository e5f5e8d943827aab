"""Exact resume: ``sarl run --local`` processes killed for real (SIGKILL, SIGTERM) at chosen points,
then ``--resume``: one MLflow run, each step's metrics once, no leftovers; a run stopped by SIGTERM
is closed KILLED; resuming a finished run changes nothing.

The child is the real CLI with one stall patched in (``CHILD``): at step ``STALL_STEP`` it writes
``STALL_FLAG`` and sleeps, before the checkpoint save starts, after the first file was copied
into the store's temp directory, or after the save, so the parent kills it at that point and not
at a race.
Tracking goes to the real MLflow server (``mlflow_server``), checkpoints to the local store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow

CHILD = """
import os, sys, time
from pathlib import Path

step, where = int(os.environ["STALL_STEP"]), os.environ["STALL_WHERE"]

def stall():
    Path(os.environ["STALL_FLAG"]).write_text(str(os.getpid()))
    time.sleep(600)

if where in ("before_save", "after_save"):
    from sarl.runner import callbacks
    on_save = callbacks.CheckpointCallback.on_save
    def stalling_on_save(self, args, state, control, **kw):
        if state.global_step == step and where == "before_save":
            stall()
        on_save(self, args, state, control, **kw)
        if state.global_step == step:
            stall()
    callbacks.CheckpointCallback.on_save = stalling_on_save
elif where == "mid_save":
    import sarl.storage.local as local
    copy = local.copy_and_hash
    def stalling_copy(src, dst, rel, progress):
        entry = copy(src, dst, rel, progress)
        if f"step-{step:08d}.tmp-" in str(dst):
            stall()
        return entry
    local.copy_and_hash = stalling_copy

from sarl.cli.main import main
sys.argv = ["sarl", *sys.argv[1:]]
main()
"""


def _plain_signals() -> None:
    """In the child: the dispositions of a plain process, not the caller's (under ``nohup`` or
    a background job SIGHUP/SIGINT come ignored, and the run rightly keeps them ignored)."""
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


@dataclass
class Local:
    """One experiment's files: spec, workdir (shared policy cache), store, MLflow server."""

    spec: Path
    workdir: Path
    uri: str
    name: str

    @property
    def store(self) -> Path:
        return self.workdir / "checkpoints" / self.name

    def start(self, *flags: str, stall: tuple[str, int] | None = None) -> subprocess.Popen[str]:
        env = {**os.environ, "SARL_NO_PROGRESS": "1", "STALL_WHERE": "", "STALL_STEP": "0"}
        env["STALL_FLAG"] = str(self.workdir / f"stalled-{self.name}")
        if stall is not None:
            env["STALL_WHERE"], env["STALL_STEP"] = stall[0], str(stall[1])
        cmd = [sys.executable, "-c", textwrap.dedent(CHILD), "run", str(self.spec), "--local"]
        cmd += ["--workdir", str(self.workdir), "--tracking-uri", self.uri, *flags]
        return subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_plain_signals,
        )

    def run(self, *flags: str) -> subprocess.CompletedProcess[str]:
        proc = self.start(*flags)
        out, err = proc.communicate(timeout=400)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def stop_at(self, where: str, step: int, signum: int) -> subprocess.CompletedProcess[str]:
        """Start a run, wait until it stalls at ``where`` of ``step``, send ``signum``."""
        flag = self.workdir / f"stalled-{self.name}"
        flag.unlink(missing_ok=True)
        proc = self.start(stall=(where, step))
        deadline = time.monotonic() + 400  # the first run of the module warm-starts the policy
        while not flag.exists():
            if proc.poll() is not None:
                raise AssertionError(f"run ended before stalling: {proc.communicate()[1]}")
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("run never reached the stall")
            time.sleep(0.2)
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def runs(self) -> list[Any]:
        client = mlflow.MlflowClient(self.uri)
        experiment = client.get_experiment_by_name(self.name)
        return list(client.search_runs([experiment.experiment_id])) if experiment else []

    def steps(self, run_id: str) -> dict[str, list[int]]:
        """Every metric of the run -> the steps of its history, as logged (sorted)."""
        client = mlflow.MlflowClient(self.uri)
        keys = client.get_run(run_id).data.metrics
        return {k: sorted(m.step for m in client.get_metric_history(run_id, k)) for k in keys}

    def leftovers(self) -> list[str]:
        """Temp files/directories anywhere in the store or the run's workdir state."""
        where = [self.store, self.workdir / "runs" / self.name]
        return sorted(str(p) for root in where for p in root.rglob("*") if ".tmp-" in p.name)


@pytest.fixture
def local(workdir: Path, mlflow_server: Any) -> Local:
    name = f"resume-{uuid.uuid4().hex[:6]}"
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
                "max_steps": 4,
                "learning_rate": 1e-3,
            },
            "evaluation": {"k": 2, "every_n_steps": 2, "max_problems": 4},
            "tracking": {"log_maps_every_n_steps": 100},
            "storage": {"every_n_steps": 2},
            "reward": [{"name": "ground_truth", "weight": 1.0}],
        },
    }
    spec = workdir / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(doc))
    return Local(spec, workdir, mlflow_server.url, name)


def _assert_one_complete_run(local: Local) -> str:
    (run,) = local.runs()
    assert run.info.status == "FINISHED"
    steps = local.steps(run.info.run_id)
    assert steps["reward/mean"] == [1, 2, 3, 4]
    assert steps["eval/heldout/pass_at_2"] == [0, 2, 4]
    assert {k: v for k, v in steps.items() if len(v) != len(set(v))} == {}  # each step once
    assert local.leftovers() == []
    return str(run.info.run_id)


def test_sigkill_before_the_first_checkpoint_then_resume_continues_that_run(local: Local) -> None:
    killed = local.stop_at("before_save", 2, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    (run,) = local.runs()
    assert run.info.status == "RUNNING"  # SIGKILL: nobody could close it
    assert local.steps(run.info.run_id)["reward/mean"] == [1, 2]
    # Only the killed run's lease (sarl.storage.lease): its pid is gone, so the resume takes it.
    assert not local.store.exists() or [p.name for p in local.store.iterdir()] in (
        [],
        ["lease.json"],
    )

    resumed = local.run("--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert _assert_one_complete_run(local) == run.info.run_id
    # No checkpoint to resume from: said, not silent.
    assert f"starts from step 0 again in MLflow run {run.info.run_id}" in resumed.stderr


def test_sigkill_mid_save_then_resume_removes_leftovers_and_logs_steps_once(
    local: Local,
) -> None:
    killed = local.stop_at("mid_save", 4, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert [p.name.split(".")[0] for p in local.store.glob("*.tmp-*")] == ["step-00000004"]
    (run,) = local.runs()
    assert local.steps(run.info.run_id)["reward/mean"] == [1, 2, 3, 4]  # 3, 4 are replayed

    resumed = local.run("--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert _assert_one_complete_run(local) == run.info.run_id
    assert sorted(p.name for p in local.store.iterdir()) == ["step-00000002", "step-00000004"]
    # The tiny policy ties lm_head to the embedding: its absence from the checkpoint is expected.
    assert "missing keys" not in resumed.stderr

    # Resuming the finished run: a one-line no-op; nothing logged, saved or pruned.
    manifests = {p: p.read_bytes() for p in local.store.glob("*/manifest.json")}
    before = local.steps(run.info.run_id)
    again = local.run("--resume")
    assert again.returncode == 0, again.stderr
    assert f"MLflow run {run.info.run_id} already finished at step 4" in again.stdout
    assert {p: p.read_bytes() for p in local.store.glob("*/manifest.json")} == manifests
    assert local.steps(run.info.run_id) == before
    assert [r.info.status for r in local.runs()] == ["FINISHED"]


def test_sigterm_closes_the_run_killed_and_removes_the_partial_save(local: Local) -> None:
    stopped = local.stop_at("mid_save", 2, signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in stopped.stderr and "--resume" in stopped.stderr
    # The hint resumes against the same store: the options that selected it (issue 40 item 6).
    assert f"--workdir {local.workdir} --tracking-uri {local.uri}`" in stopped.stderr
    (run,) = local.runs()
    assert run.info.status == "KILLED"
    assert local.steps(run.info.run_id)["reward/mean"] == [1, 2]
    assert local.leftovers() == []
    assert not any(local.store.iterdir())  # the interrupted save of step 2 left nothing
    marker = json.loads((local.workdir / "runs" / local.name / "run.json").read_text())
    assert marker["run_id"] == run.info.run_id


def test_sigterm_after_the_last_checkpoint_then_resume_only_finishes_the_run(local: Local) -> None:
    """Killed between the last save and the final evaluation (evaluations every 3 steps of 4)."""
    doc = yaml.safe_load(local.spec.read_text())
    doc["spec"]["evaluation"]["every_n_steps"] = 3
    local.spec.write_text(yaml.safe_dump(doc))
    stopped = local.stop_at("after_save", 4, signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM
    (run,) = local.runs()
    assert run.info.status == "KILLED"
    assert local.steps(run.info.run_id)["eval/heldout/pass_at_2"] == [0, 3]
    manifest = (local.store / "step-00000004" / "manifest.json").read_bytes()

    resumed = local.run("--resume")
    assert resumed.returncode == 0, resumed.stderr
    (run,) = local.runs()
    assert run.info.status == "FINISHED"
    steps = local.steps(run.info.run_id)
    assert steps["reward/mean"] == [1, 2, 3, 4]  # nothing trained
    assert steps["eval/heldout/pass_at_2"] == [0, 3, 4]  # the final evaluation it missed
    assert (local.store / "step-00000004" / "manifest.json").read_bytes() == manifest
