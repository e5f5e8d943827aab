"""The run directory: one session at a time (the lock names its holder), the marker naming the
MLflow run, and a trainer directory holding nothing but the checkpoint a resume starts from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sarl.runner.preflight import PreflightError
from sarl.runner.rundir import RunDir, RunMarker
from sarl.storage import open_store


def test_a_second_session_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    rundir = RunDir(tmp_path / "runs" / "exp")
    holder = rf"'exp' is running \(pid {os.getpid()}\)"
    # flock locks belong to the open file: a second open in this process conflicts too.
    with (
        rundir.locked("exp"),
        pytest.raises(PreflightError, match=holder),
        RunDir(tmp_path / "runs" / "exp").locked("exp"),
    ):
        pass
    with rundir.locked("exp"):  # released on exit
        pass


def test_marker_round_trip_and_unreadable_marker(tmp_path: Path) -> None:
    rundir = RunDir(tmp_path / "exp")
    assert rundir.marker() is None
    marker = RunMarker("abc123", "sqlite:///x.db", "/ckpt/exp")
    rundir.write_marker(marker)
    assert rundir.marker() == marker
    (rundir.root / "run.json").write_text("{not json")
    assert rundir.marker() is None


def _trainer_checkpoint(path: Path, weights: bytes) -> Path:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(weights)
    (path / "trainer_state.json").write_text('{"global_step": 2}')
    return path


@pytest.mark.parametrize("local_copy", ["same", "changed", "missing"])
def test_prepare_trainer_keeps_only_an_exact_copy_of_the_checkpoint(
    tmp_path: Path, local_copy: str
) -> None:
    rundir = RunDir(tmp_path / "exp")
    store = open_store(str(tmp_path / "store"))
    info = store.save(2, _trainer_checkpoint(tmp_path / "src", b"weights"), {})
    if local_copy != "missing":
        weights = b"weights" if local_copy == "same" else b"weightz"  # same size, other bytes
        _trainer_checkpoint(rundir.trainer / "checkpoint-2", weights)
    _trainer_checkpoint(rundir.trainer / "checkpoint-4", b"half-written by a killed run")
    (rundir.trainer / ".checkpoint-2.tmp-0123").mkdir()  # an interrupted download

    kept = rundir.prepare_trainer(info)

    if local_copy == "same":
        assert kept == rundir.trainer / "checkpoint-2"
        assert [p.name for p in rundir.trainer.iterdir()] == ["checkpoint-2"]
    else:
        assert kept is None
        assert list(rundir.trainer.iterdir()) == []


def test_prepare_trainer_for_a_new_run_empties_it(tmp_path: Path) -> None:
    rundir = RunDir(tmp_path / "exp")
    _trainer_checkpoint(rundir.trainer / "checkpoint-4", b"old")
    (rundir.trainer / "README.md").write_text("model card")
    assert rundir.prepare_trainer(None) is None
    assert list(rundir.trainer.iterdir()) == []
