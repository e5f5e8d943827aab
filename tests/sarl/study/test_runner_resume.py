"""A Study run that dies before its first checkpoint keeps one MLflow run when the Study is run
again (the rerun continues it instead of starting a second run for the same arm and seed).

Real parts: TRL training of the tiny model, the MLflow client on a SQLite store, the local
checkpoint store. The crash is an exception raised in the checkpoint callback before anything is
saved (the same state a SIGKILL leaves: a run marker, an open MLflow run, no checkpoint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sarl.spec.loader import load_study
from sarl.spec.study import TAG_ARM, TAG_SEED
from sarl.study.runner import StudyOptions, run_study
from sarl.tracking.metrics import REWARD_MEAN
from tests.sarl.study.test_runner import tiny_study

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow


def test_run_killed_before_its_first_checkpoint_is_continued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sarl.runner import callbacks

    opts = StudyOptions(
        workdir=tmp_path / ".sarl",
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        progress=False,
        out_dir=tmp_path / "out",
    )
    doc = tiny_study("early-crash", seeds=[0], arms=[{"name": "ground-truth"}])
    original = callbacks.CheckpointCallback.on_save

    def crash_before_first_save(self: Any, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == 1:
            raise RuntimeError("killed before saving")
        original(self, args, state, control, **kw)

    monkeypatch.setattr(callbacks.CheckpointCallback, "on_save", crash_before_first_save)
    first = run_study(load_study(doc), opts)
    assert [o.status for o in first.outcomes] == ["failed"]
    monkeypatch.setattr(callbacks.CheckpointCallback, "on_save", original)
    second = run_study(load_study(doc), opts)
    assert [o.status for o in second.outcomes] == ["finished"]

    client = mlflow.MlflowClient(opts.tracking_uri)
    experiments = client.search_experiments()
    runs = client.search_runs(
        [e.experiment_id for e in experiments],
        filter_string=f"tags.`{TAG_ARM}` = 'ground-truth' and tags.`{TAG_SEED}` = '0'",
    )
    assert [r.info.run_id for r in runs] == [second.outcomes[0].run_id]
    assert runs[0].info.status == "FINISHED"
    # Step 1's metrics were logged by the first attempt; the continued run has them once.
    history = client.get_metric_history(runs[0].info.run_id, REWARD_MEAN)
    assert sorted(m.step for m in history) == [1, 2]
