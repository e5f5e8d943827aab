"""verl's post-save hook pushes each ``global_step_N`` directory to the store and prunes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("minio")  # sarl.storage's S3 client (the [local] extra)

from sarl.storage import open_store
from sarl_jobs.checkpoints import StoreCheckpointCallback


def save_step(root: Path, step: int) -> Path:
    step_dir = root / f"global_step_{step}"
    (step_dir / "actor").mkdir(parents=True)
    (step_dir / "actor" / "model.pt").write_bytes(bytes([step]) * 10)
    return step_dir


def test_each_save_is_uploaded_and_old_ones_pruned(tmp_path: Path) -> None:
    uri = str(tmp_path / "store")
    config = {"sarl": {"storage": {"checkpoint_uri": uri, "keep_last": 2}}}
    callback = StoreCheckpointCallback(config=config)
    for step in (1, 2, 3):
        callback.on_save(
            trainer=None, global_step=step, checkpoint_dir=str(save_step(tmp_path, step))
        )
    stored = open_store(uri).list()
    assert [info.step for info in stored] == [2, 3]
    assert [f.path for f in stored[-1].files] == ["actor/model.pt"]


def test_without_a_uri_nothing_is_uploaded(tmp_path: Path) -> None:
    callback = StoreCheckpointCallback(config={"trainer": {}})
    callback.on_save(global_step=1, checkpoint_dir=str(save_step(tmp_path, 1)))
    assert callback.store is None


def test_built_away_from_the_jobs_driver_it_refuses_to_start(tmp_path: Path) -> None:
    """verl's TaskRunner on another node than the driver would write metrics nobody reads."""
    metrics = tmp_path / "tracking" / "metrics.jsonl"  # no snapshots/ beside it: no driver here
    config = {"sarl": {"tracking": {"metrics_file": str(metrics)}}}
    with pytest.raises(RuntimeError, match="not on the node of the job's driver"):
        StoreCheckpointCallback(config=config)
