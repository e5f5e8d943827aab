"""Creating the MLflow experiment and run that a :class:`~sarl.tracking.tracker.Tracker` logs to.

Called by :meth:`Tracker.start <sarl.tracking.tracker.Tracker.start>` (and, for making a run MLflow
lost again, :mod:`sarl.tracking.reattach`), before the run's spool exists: these talk to MLflow
directly (an unreachable server fails the start with one line,
:func:`~sarl.tracking.store.guarded`). The experiment is created if missing and given sarl's tags
(:mod:`sarl.tracking.describe`); the run's params are logged in MLflow-sized batches.
Everything sent is redacted (:func:`sarl.spec.secrets.redact`) first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from sarl.spec.secrets import redact
from sarl.tracking.describe import NOTE_TAG, experiment_tags, missing_experiment_tags
from sarl.tracking.params import MAX_PARAMS_TAGS_PER_BATCH, param_value
from sarl.tracking.store import (
    TrackingError,
    error_code,
    guarded,
    local_artifact_location,
    one_line,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def ensure_experiment(client: MlflowClient, uri: str, name: str, description: str) -> str:
    """The id of experiment ``name``, created (with a local artifact folder for SQLite) if new.

    sarl's experiment tags (:func:`~sarl.tracking.describe.experiment_tags`: kind "model
    training" and ``description``) are set on creation, and added to an existing experiment
    that lacks them (one made by an older sarl or by hand) without replacing its own."""
    experiment = guarded(
        uri, f"looking up experiment {name!r}", lambda: client.get_experiment_by_name(name)
    )
    if experiment is None:
        try:
            return str(
                client.create_experiment(
                    name,
                    artifact_location=local_artifact_location(uri),
                    tags=redact(experiment_tags(description)),
                )
            )
        except Exception as e:
            if error_code(e) != "RESOURCE_ALREADY_EXISTS":
                raise TrackingError(
                    f"tracking: creating experiment {name!r} at {uri} failed: {one_line(e)}"
                ) from e
        # Another process created it between our lookup and create: use theirs.
        experiment = guarded(
            uri, f"looking up experiment {name!r}", lambda: client.get_experiment_by_name(name)
        )
        if experiment is None:
            raise TrackingError(
                f"tracking: experiment {name!r} at {uri} vanished while creating it"
            )
    if experiment.lifecycle_stage == "deleted":
        raise TrackingError(
            f"tracking: experiment {name!r} at {uri} is deleted; restore it "
            "(mlflow experiments restore) or choose another tracking.experiment_name"
        )
    _add_experiment_tags(client, str(experiment.experiment_id), experiment.tags, description)
    return str(experiment.experiment_id)


def _add_experiment_tags(
    client: MlflowClient, experiment_id: str, existing: Mapping[str, str], description: str
) -> None:
    """Best effort: a server that lets this user log runs but not edit the experiment (MLflow's
    auth has per-experiment permissions) must not stop training for a label."""
    for key, value in redact(missing_experiment_tags(existing, description)).items():
        try:
            client.set_experiment_tag(experiment_id, key, value)
        except Exception as e:
            _LOG.warning("tracking: could not tag experiment %s %s: %s", experiment_id, key, e)
            return


def log_params(client: MlflowClient, uri: str, run_id: str, params: Mapping[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(k, param_value(v)) for k, v in redact(params).items()]
    for batch in _chunks(items, MAX_PARAMS_TAGS_PER_BATCH):
        guarded(
            uri,
            f"logging params of run {run_id}",
            partial(client.log_batch, run_id, params=list(batch)),
        )


def run_info(
    experiment: str, name: str, tags: Mapping[str, str], params: Mapping[str, str]
) -> dict[str, Any]:
    """What a run is, for its spool's header: enough to make it again if MLflow loses it
    (:mod:`sarl.tracking.reattach`)."""
    return {
        "experiment": experiment,
        "name": name,
        "tags": {str(k): str(v) for k, v in tags.items()},
        "params": {str(k): str(v) for k, v in params.items()},
    }


def resumed_run_info(client: MlflowClient, run: Any) -> dict[str, Any] | None:
    """What a resumed run is (for the spool's header), read from MLflow; ``None`` if the
    experiment cannot be read (the header then keeps what an earlier tracker wrote)."""
    try:
        experiment = client.get_experiment(run.info.experiment_id).name
    except Exception as e:  # the run itself was readable; this is only for a later re-attach
        _LOG.warning("tracking: could not read the experiment of run %s: %s", run, one_line(e))
        return None
    # MLflow's own tags (user, source, run name) are set again by MLflow on a new run.
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.") or k == NOTE_TAG}
    return run_info(experiment, run.info.run_name, tags, run.data.params)
