"""An MLflow outage longer than every retry budget neither stops the TRL cluster job nor loses a
metric (issue 27, item 1): the job (``python -m sarl_jobs.trl_trainer spec.yaml``, torchrun on one
CPU node, the run created beforehand and named by ``MLFLOW_RUN_ID`` as the operator does) logs
through the spooling tracker; the real MLflow server is SIGKILLed mid-run and restarted on the same
port and database, and every step's metrics appear exactly once.

One patch, through a ``sitecustomize`` on the child's ``PYTHONPATH`` (so it reaches the training
process torchrun starts): after spooling the metrics of each step in ``STALL_STEPS`` the tracker
writes ``stalled-<step>`` and waits for ``go-<step>``, so the server is killed and restarted at
chosen steps, not at a race. The outage lasts until the job has failed more sends than the old
tracker's 3 attempts (counted in its log lines), however long that takes on a busy machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("accelerate")
pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

from tests.sarl.runner.test_tracking_outage import (  # noqa: E402
    OLD_ATTEMPTS,
    OUTAGE_ENV,
    Server,
    _waiting,
)

pytestmark = pytest.mark.slow

MAX_STEPS = 6
EVERY = 2  # storage.every_n_steps
SITECUSTOMIZE = """
import os, time
from pathlib import Path

if os.environ.get("STALL_STEPS"):
    from sarl.tracking import tracker as _tracker

    _stalls = {int(s) for s in os.environ["STALL_STEPS"].split(",") if s}
    _where = Path(os.environ["STALL_DIR"])
    _log_metrics = _tracker.Tracker.log_metrics

    def _stalling(self, metrics, step):
        _log_metrics(self, metrics, step)
        if step in _stalls and "reward" in metrics:
            _stalls.discard(step)
            (_where / f"stalled-{step}").write_text(str(os.getpid()))
            deadline = time.monotonic() + 900
            while not (_where / f"go-{step}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)

    _tracker.Tracker.log_metrics = _stalling
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "mlflow")
    srv.start()
    yield srv
    srv.stop()


def spec(name: str, store: Path) -> dict[str, object]:
    """The local GRPO preset cut to seconds on one CPU node (as tests/jobs/test_trl_multinode)."""
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "preset": "local-grpo-arithmetic",
            "model": {"warm_start": {"steps": 2, "max_response_tokens": 24}},
            "data": {"train_size": 32, "eval_size": 4, "difficulty": 1},
            "algorithm": {
                "rollouts_per_prompt": 2,
                "train_batch_size": 2,
                "mini_batch_size": 2,
                "micro_batch_size_per_gpu": 1,
                "max_prompt_length": 48,
                "max_response_length": 16,
                "max_steps": MAX_STEPS,
            },
            "reward": [{"name": "format_length", "settings": {"max_length": 48}}],
            "storage": {"every_n_steps": EVERY, "checkpoint_uri": str(store)},
            "resources": {"backend": "trl", "nodes": 1, "gpus_per_node": 0},
        },
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(proc: subprocess.Popen[str], err: Path, done: object, what: str) -> None:
    deadline = time.monotonic() + 600  # generous: a busy machine, a cold policy cache
    while not (done() if callable(done) else done):
        assert proc.poll() is None, f"job ended before {what}: {err.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


@pytest.mark.timeout(1800)
def test_trl_job_survives_an_outage_longer_than_every_retry_budget(
    server: Server, tmp_path: Path
) -> None:
    name = "trl-outage"
    store, scratch, stalls = tmp_path / "store", tmp_path / "scratch", tmp_path / "stalls"
    for folder in (scratch, stalls, tmp_path / "hook"):
        folder.mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec(name, store)))
    client = mlflow.MlflowClient(server.url)
    run_id = client.create_run(client.create_experiment(name), run_name=name).info.run_id

    env = {**os.environ, **OUTAGE_ENV, "HF_HUB_OFFLINE": "1", "TMPDIR": str(scratch)}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hook"), env.get("PYTHONPATH", "")])
    env |= {"MLFLOW_TRACKING_URI": server.url, "MLFLOW_RUN_ID": run_id}
    env |= {"STALL_STEPS": f"2,{EVERY * 2 + 1}", "STALL_DIR": str(stalls)}
    # A free rendezvous port: the default 23456 may be held by another run on this machine.
    port = str(_free_port())
    env |= {"MASTER_PORT": port, "PET_MASTER_PORT": port}
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sarl_jobs.trl_trainer", str(path)],
            env=env,
            stdout=o,
            stderr=e,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # killpg reaches torchrun and its worker too
        )
    try:
        wait_for(proc, err, (stalls / "stalled-2").exists, "step 2")
        server.kill()
        (stalls / "go-2").write_text("")
        # Steps 3-5 train with MLflow down; the checkpoint of step 4 is stored meanwhile.
        wait_for(proc, err, (stalls / "stalled-5").exists, "step 5")
        wait_for(
            proc,
            err,
            lambda: err.read_text().count("not answering") > OLD_ATTEMPTS,
            "the drainer's retries",
        )
        spool = scratch / "sarl-tracking" / run_id
        assert _waiting(spool) > 0
        tails = list(store.rglob("sarl-tracking-spool"))  # only step 4's holds unsent records
        assert any(_waiting(tail) > 0 for tail in tails), tails
        server.start()
        (stalls / "go-5").write_text("")
        assert proc.wait(timeout=900) == 0, err.read_text()[-4000:]
    finally:
        # The whole group: a failed wait must not leave torchrun holding its port.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "answers again" in err.read_text()
    assert f"tracking: every record of run {run_id} reached MLflow" in out.read_text()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    steps = {
        key: sorted(m.step for m in client.get_metric_history(run_id, key))
        for key in run.data.metrics
    }
    for key in ("reward", "loss", "grad_norm"):
        assert steps[key] == list(range(1, MAX_STEPS + 1)), key
    assert {k: v for k, v in steps.items() if len(v) != len(set(v))} == {}  # each step once
    assert _waiting(spool) == 0
