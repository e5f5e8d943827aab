"""A resumed verl job sends the metrics its predecessor could not: each uploaded checkpoint carries
the driver's unsent records (``sarl-tracking-spool/``) and the resumed driver adopts them.

Job 1 trains steps 1-3 while MLflow is down (a real server, SIGKILLed) and dies without finishing
anything; verl 0.9.1 saves checkpoint 3 *before* it logs step 3
(``verl/trainer/ppo/v1/trainer_base.py``, ``fit``), so the checkpoint carries steps 1-2. Job 2
restores checkpoint 3 (:func:`sarl_jobs.resume.restore_verl`), opens the run again with MLflow back
and trains steps 4-5. The verl side is the real ``verl.utils.tracking.Tracking`` with the ``file``
backend (``FileLogger``, ``verl/utils/tracking.py`` lines 529-548) and the job's real
:class:`sarl_jobs.checkpoints.StoreCheckpointCallback`, called as verl calls it; no GPU work.

* Pod lost (a new pod, its scratch gone): steps 1-2 come from the checkpoint; step 3, logged
  after its own checkpoint's upload, was only in the lost driver's spool — the one gap the module
  docstring of :mod:`sarl_jobs.verl_tracking` names.
* Container restarted in place (the scratch kept): the run's own spool is reopened and the old
  metrics file read again, so step 3 arrives too, and nothing twice.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
pytest.importorskip("minio")  # sarl.storage (the [local] extra)
mlflow = pytest.importorskip("mlflow")

from sarl.spec.experiment import Experiment  # noqa: E402
from sarl_jobs.checkpoints import StoreCheckpointCallback  # noqa: E402
from sarl_jobs.resume import VERL_TRACKER, StoreSettings, restore_verl  # noqa: E402
from sarl_jobs.verl_tracking import open_tracking  # noqa: E402
from tests.jobs.outage import OUTAGE_ENV, Server, spool_steps  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "mlflow")
    srv.start()
    yield srv
    srv.stop()


def verl_logger(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from verl.utils.tracking import Tracking

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return Tracking("verl-resume", "verl-resume", default_backend=["file"])


def log_step(writer: Any, step: int) -> None:
    writer.log({"actor/loss": 1.0 / step, "critic/score/mean": float(step)}, step=step)


@pytest.mark.parametrize(
    ("scratch_kept", "steps"), [(False, [1, 2, 4, 5]), (True, [1, 2, 3, 4, 5])]
)
def test_a_resumed_job_sends_what_the_checkpoint_carries(
    server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scratch_kept: bool,
    steps: list[int],
) -> None:
    for key, value in OUTAGE_ENV.items():
        monkeypatch.setenv(key, value)
    client = mlflow.MlflowClient(server.url)
    run_id = client.create_run(client.create_experiment("verl-resume")).info.run_id
    spec = {"preset": "local-grpo-arithmetic", "tracking": {"mlflow_uri": server.url}}
    exp = Experiment.model_validate({"metadata": {"name": "verl-resume"}, "spec": spec})
    root, store = tmp_path / "work", tmp_path / "store"
    env = {"MLFLOW_RUN_ID": run_id}

    # Job 1: MLflow goes down; steps 1-3, checkpoint 3 saved and uploaded before step 3 is logged.
    first = open_tracking(exp, root, env, poll_s=0.05)
    assert first is not None
    config = {
        "sarl": {
            "storage": {"checkpoint_uri": str(store), "keep_last": 5},
            "tracking": {"metrics_file": str(first.metrics_file)},
        }
    }
    callback = StoreCheckpointCallback(config=config)
    server.kill()
    first.__enter__()
    writer = verl_logger(first.metrics_file, monkeypatch)
    for step in (1, 2, 3):
        if step == 3:
            ckpt = root / "checkpoints" / "global_step_3"
            (ckpt / "actor").mkdir(parents=True)
            (ckpt / "actor" / "model.pt").write_bytes(b"w" * 8)
            (root / "checkpoints" / VERL_TRACKER).write_text("3")
            callback.on_save(trainer=None, global_step=3, checkpoint_dir=str(ckpt))
            assert spool_steps(ckpt / "sarl-tracking-spool") == [1, 2]  # not step 3: see above
        log_step(writer, step)
    writer.finish()
    first.tailer.stop()
    first.tracker.abandon()  # the job dies: nothing finished, nothing sent
    if not scratch_kept:
        shutil.rmtree(root)
    server.start()

    # Job 2: restore checkpoint 3, adopt its tail, train steps 4-5.
    settings = StoreSettings(uri=str(store), endpoint_url=None, keep_last=5)
    assert restore_verl(settings, root / "checkpoints") == 3
    second = open_tracking(
        exp, root, env, resumed_from=root / "checkpoints" / "global_step_3", poll_s=0.05
    )
    assert second is not None
    with second:
        writer = verl_logger(second.metrics_file, monkeypatch)
        for step in (4, 5):
            log_step(writer, step)
        writer.finish()

    assert second.tracker.left == 0
    assert client.get_run(run_id).info.status == "FINISHED"
    for key in ("actor/loss", "critic/score/mean"):
        history = client.get_metric_history(run_id, key)
        assert sorted(m.step for m in history) == steps, key  # each step once
