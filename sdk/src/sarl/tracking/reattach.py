"""Re-attach a spool whose MLflow run is gone to a new run: ``sarl tracking flush DIR --new-run``.

Called by :mod:`sarl.cli.tracking`. When MLflow comes back without a run (a server restored from
an older backup, a new database) its spool's records cannot be delivered: the drainer keeps them
(:mod:`sarl.tracking.drainer`, verdict *gone*) rather than drop them. This module makes the run
again and points the spool at it; the flush then sends everything the spool still holds.

The choice, and why it is not automatic: a run's id is written into its checkpoints and its run
directory, so a run replaced behind the trainer's back would leave ``--resume`` pointing at the
old id; and a server may be briefly restored from an older backup and then fixed. So the records
stay, the run's closing line and ``sarl tracking flush`` say what happened, and the user decides.

The new run gets the old run's experiment name (the experiment is created if it went too), name,
tags and params, as :class:`~sarl.tracking.tracker.Tracker` noted them in the spool's header, plus
the tag :data:`REPLACES_TAG` naming the old run id. What MLflow had received before it lost the run
is not in the spool any more and is not re-sent: only the records still waiting are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sarl.tracking.describe import experiment_description
from sarl.tracking.drainer import GONE
from sarl.tracking.run_setup import ensure_experiment, log_params
from sarl.tracking.store import TrackingError, error_code, guarded, one_line

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from sarl.tracking.spool import Spool

#: Tag of a re-attached run: the id of the run MLflow lost.
REPLACES_TAG = "sarl.tracking.replaces_run"


def new_run(spool: Spool, client: MlflowClient) -> str:
    """Create the replacement of ``spool``'s lost run and point the spool at it; returns the new
    run id. :class:`TrackingError` (one line) if the old run still exists, the spool does not
    say what the run was, or MLflow fails."""
    uri, old = spool.tracking_uri, spool.run_id
    _check_gone(client, uri, old)
    info = spool.run_info
    if not info or not isinstance(info.get("experiment"), str) or not info.get("name"):
        raise TrackingError(
            f"{spool.root}: the spool does not record run {old}'s experiment and name (written "
            "by an older sarl), so it cannot be re-attached; its records are kept"
        )
    name = str(info["experiment"])
    experiment_id = ensure_experiment(client, uri, name, experiment_description(name))
    tags = {**_strings(info.get("tags")), REPLACES_TAG: old}
    run = guarded(
        uri,
        f"creating run {info['name']!r} in place of {old}",
        lambda: client.create_run(experiment_id, run_name=str(info["name"]), tags=tags),
    )
    log_params(client, uri, run.info.run_id, _strings(info.get("params")))
    spool.rebind(run.info.run_id)
    return str(run.info.run_id)


def _check_gone(client: MlflowClient, uri: str, run_id: str) -> None:
    try:
        client.get_run(run_id)
    except Exception as e:
        if error_code(e) in GONE:
            return
        raise TrackingError(f"tracking: reading run {run_id} at {uri} failed: {one_line(e)}") from e
    raise TrackingError(
        f"run {run_id} still exists at {uri}; send its records with `sarl tracking flush` "
        "without --new-run"
    )


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


__all__ = ["REPLACES_TAG", "new_run"]
