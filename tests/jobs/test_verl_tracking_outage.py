"""An MLflow outage longer than every retry budget neither stops the verl job's training nor loses
a metric (issue 27): verl's metrics go through the job's durable spool, not verl's MLflow logger.

The verl side is a child process standing for verl 0.9.1's TaskRunner: the real
``verl.utils.tracking.Tracking`` with the ``file`` backend (``FileLogger``,
``verl/utils/tracking.py`` lines 529-548: ``$VERL_FILE_LOGGER_PATH`` opened ``"wb"``, one line per
``log``), and the job's real :class:`sarl_jobs.checkpoints.StoreCheckpointCallback`, called as
verl's trainer calls it — the checkpoint of step N saved *before* step N is logged
(``verl/trainer/ppo/v1/trainer_base.py``, ``fit``). The GPU work is left out. The driver side is
this process: :func:`sarl_jobs.verl_tracking.open_tracking` and its tailer, against a real MLflow
server that is SIGKILLed after step 2 and started again (same port and database) only once the
tracker has failed more sends than verl's MLflow logger tries (3), however long that takes on a
busy machine. After each step in ``stalls`` the child waits for ``go-<step>``, so the server goes
down and comes back at chosen steps, not at a race.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("minio")  # sarl.storage (the [local] extra)
mlflow = pytest.importorskip("mlflow")

from sarl.spec.experiment import Experiment  # noqa: E402
from sarl.storage import open_store  # noqa: E402
from sarl_jobs.verl_tracking import open_tracking  # noqa: E402
from tests.jobs.outage import (  # noqa: E402
    OUTAGE_ENV,
    VERL_ATTEMPTS,
    FailedSends,
    Server,
    spool_steps,
    wait_until,
)

pytestmark = pytest.mark.slow

STEPS = 7
EVERY = 2  # trainer.save_freq; verl saves the last step too
KEYS = ("actor/loss", "critic/score/mean", "val-core/arith/acc/mean_at_1")
TASK_RUNNER = """
import json, sys, time
from pathlib import Path

from verl.utils.tracking import Tracking

from sarl_jobs.checkpoints import StoreCheckpointCallback

cfg = json.loads(sys.argv[1])
control = Path(cfg["control"])
callback = StoreCheckpointCallback(config=cfg["verl_config"])
tracking = Tracking("verl-outage", "verl-outage", default_backend=["file"])
for step in range(1, cfg["steps"] + 1):
    if step % cfg["every"] == 0 or step == cfg["steps"]:  # "2. save checkpoint"
        ckpt = Path(cfg["checkpoints"]) / f"global_step_{step}"
        (ckpt / "actor").mkdir(parents=True)
        (ckpt / "actor" / "model.pt").write_bytes(bytes([step]) * 8)
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(ckpt))
    metrics = {"actor/loss": 1.0 / step, "critic/score/mean": float(step)}
    tracking.log({**metrics, "val-core/arith/acc/mean@1": step / 10}, step=step)  # "5. record"
    print(f"logged step {step}", flush=True)
    if step in cfg["stalls"]:
        (control / f"stalled-{step}").write_text("")
        deadline = time.monotonic() + 900
        while not (control / f"go-{step}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
tracking.finish()
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "mlflow")
    srv.start()
    yield srv
    srv.stop()


def stored_tail(store: Path, step: int, into: Path) -> Path:
    """The tracking tail of the store's checkpoint ``step``, downloaded into ``into``."""
    backend = open_store(str(store))
    (info,) = [i for i in backend.list() if i.step == step]
    return backend.download(info, into) / "sarl-tracking-spool"


@pytest.mark.timeout(1800)
def test_verl_metrics_survive_an_outage_longer_than_every_retry_budget(
    server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in OUTAGE_ENV.items():
        monkeypatch.setenv(key, value)
    client = mlflow.MlflowClient(server.url)
    experiment_id = client.create_experiment("verl-outage")
    run_id = client.create_run(experiment_id, run_name="verl-outage").info.run_id
    spec = {"preset": "local-grpo-arithmetic", "tracking": {"mlflow_uri": server.url}}
    exp = Experiment.model_validate({"metadata": {"name": "verl-outage"}, "spec": spec})
    root, store, control = tmp_path / "work", tmp_path / "store", tmp_path / "control"
    control.mkdir()
    tracking = open_tracking(exp, root, {"MLFLOW_RUN_ID": run_id}, poll_s=0.1)
    assert tracking is not None
    storage = {"checkpoint_uri": str(store), "keep_last": 10}
    cfg = {
        "steps": STEPS,
        "every": EVERY,
        "stalls": [2, 5],
        "control": str(control),
        "checkpoints": str(root / "checkpoints"),
        # What verl_overrides puts under `sarl` for the callback.
        "verl_config": {
            "sarl": {"storage": storage, "tracking": {"metrics_file": str(tracking.metrics_file)}}
        },
    }
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(tracking.metrics_file)}
    out, err = tmp_path / "out", tmp_path / "err"
    spooled = tracking.tracker.spool
    with FailedSends() as failed, tracking, out.open("w") as o, err.open("w") as e:
        command = [sys.executable, "-c", textwrap.dedent(TASK_RUNNER), json.dumps(cfg)]
        proc = subprocess.Popen(command, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL)

        def stalled(step: int) -> bool:
            assert proc.poll() is None, f"TaskRunner ended: {err.read_text()[-4000:]}"
            return (control / f"stalled-{step}").exists()

        try:
            wait_until(lambda: stalled(2), "step 2")
            server.kill()
            (control / "go-2").write_text("")
            # Steps 3-5 are trained and logged with MLflow down; checkpoint 4 is stored meanwhile.
            wait_until(lambda: stalled(5), "step 5")
            wait_until(lambda: failed.count > VERL_ATTEMPTS, "the tracker's failed sends")
            steps_waiting = [r.body["step"] for r in spooled.pending() if r.kind == "metrics"]
            wait_until(
                lambda: 5 in [r.body["step"] for r in spooled.pending() if r.kind == "metrics"],
                "step 5 in the spool: the tailer follows the file during the outage",
            )
            # Checkpoint 4 carries what was unsent when verl saved it: step 3 (and 2 if it had
            # not reached MLflow yet), never step 4, which verl logs after the save.
            tail = spool_steps(stored_tail(store, 4, tmp_path / "ckpt-4"))
            assert 3 in tail and max(tail) < 4, (tail, steps_waiting)
            server.start()
            (control / "go-5").write_text("")
            assert proc.wait(timeout=900) == 0, err.read_text()[-4000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # The child logged every step, the outage notwithstanding.
    logged = [line for line in out.read_text().splitlines() if line.startswith("logged")]
    assert logged == [f"logged step {s}" for s in range(1, STEPS + 1)]
    assert failed.recovered
    assert f"tracking: every record of run {run_id} reached MLflow" in capsys.readouterr().out
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    for key in KEYS:
        history = client.get_metric_history(run_id, key)
        assert sorted(m.step for m in history) == list(range(1, STEPS + 1)), key  # each once
    losses = {m.step: m.value for m in client.get_metric_history(run_id, "actor/loss")}
    assert losses == {s: 1.0 / s for s in range(1, STEPS + 1)}
    assert spooled.waiting == 0
