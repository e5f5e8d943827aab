"""Which MLflow run a local run continues, closing runs that died by SIGKILL, and the step a
complete run ends at.

Called by :class:`sarl.runner.session.LocalSession` when a run starts, with the run directory's
lock held (so no live process owns a run the marker names unless it is this one):

* the newest complete checkpoint names its run (manifest metadata ``mlflow_run_id``); without a
  checkpoint, ``--resume`` continues the run of the marker (:mod:`sarl.runner.rundir`) when it is
  still open, i.e. it was killed before its first checkpoint;
* a marker run still RUNNING that is not continued is closed ``KILLED``;
* :func:`planned_steps` tells whether a checkpoint is already the run's last step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sarl.runner.rundir import RunDir, RunMarker

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

    from sarl.storage import CheckpointInfo


class RunLookup:
    """MLflow runs of one local run: ``tracking_uri`` and ``checkpoint_uri`` are this run's."""

    def __init__(self, rundir: RunDir, tracking_uri: str, checkpoint_uri: str) -> None:
        self.rundir = rundir
        self.tracking_uri = tracking_uri
        self.checkpoint_uri = checkpoint_uri
        self._mlflow: MlflowClient | None = None

    def to_continue(self, latest: CheckpointInfo | None, resume: bool) -> str | None:
        """The run to continue: the checkpoint's, else (``resume``) the marker's run if it is
        still open; None starts a new run."""
        if latest is not None:
            named = (latest.metadata or {}).get("mlflow_run_id")
            return str(named) if named else None
        marker = self.rundir.marker()
        if not resume or marker is None or not self._ours(marker):
            return None
        run = self.find(marker.run_id)
        return marker.run_id if run is not None and run.info.status != "FINISHED" else None

    def close_abandoned(self, keep: str | None) -> None:
        """Mark the marker's run KILLED when it is still RUNNING and is not ``keep``."""
        from sarl.tracking.store import guarded

        marker = self.rundir.marker()
        if marker is None or marker.run_id == keep or marker.tracking_uri != self.tracking_uri:
            return
        run = self.find(marker.run_id)
        if run is not None and run.info.status == "RUNNING":
            client = self._client()
            guarded(
                self.tracking_uri,
                f"closing abandoned run {marker.run_id}",
                lambda: client.set_terminated(marker.run_id, "KILLED"),
            )

    def find(self, run_id: str) -> Run | None:
        """The MLflow run ``run_id``, or None when it does not exist or is deleted."""
        from sarl.tracking.store import error_code, one_line
        from sarl.tracking.tracker import TrackingError

        try:
            run = self._client().get_run(run_id)
        except Exception as e:
            if error_code(e) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None
            raise TrackingError(
                f"tracking: reading run {run_id} at {self.tracking_uri} failed: {one_line(e)}"
            ) from e
        return None if run.info.lifecycle_stage == "deleted" else run

    def _ours(self, marker: RunMarker) -> bool:
        return (marker.tracking_uri, marker.checkpoint_uri) == (
            self.tracking_uri,
            self.checkpoint_uri,
        )

    def _client(self) -> MlflowClient:
        from sarl.tracking.store import make_client

        if self._mlflow is None:
            self._mlflow = make_client(self.tracking_uri)
        return self._mlflow


def planned_steps(trainer: Any) -> int:
    """The global step a complete run ends at, computed as transformers' ``Trainer`` does
    (``set_initial_training_values``): ``max_steps`` if set, else epochs x optimizer steps per
    epoch (batches / gradient accumulation, rounded up, at least 1)."""
    args = trainer.args
    if args.max_steps > 0:
        return int(args.max_steps)
    batches: int = len(trainer.get_train_dataloader())
    epochs: float = args.num_train_epochs
    accumulation: int = args.gradient_accumulation_steps
    per_epoch = max(math.ceil(batches / accumulation), 1)
    return math.ceil(epochs * per_epoch)


def resume_note(resume: bool, latest: CheckpointInfo | None, run_id: str | None) -> str | None:
    """The line a resume without a checkpoint prints, or None when there is nothing to say.

    Only a run killed before its first checkpoint (``run_id``: its MLflow run is continued)
    is worth a line: it trains again from step 0. A first run with ``resume`` set (every run of
    ``sarl study run`` is started that way) found nothing because there was nothing: silent,
    as a fresh run is (issue 40 item 6: the old line alarmed every first run).
    """
    if not resume or latest is not None or run_id is None:
        return None
    return (
        f"resume: no checkpoint yet; training starts from step 0 again in MLflow run {run_id} "
        "(stopped before its first checkpoint)"
    )
