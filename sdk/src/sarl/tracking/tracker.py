"""Experiment tracking on MLflow: one run per experiment, logged through ``MlflowClient``.

Called by the local runner (``sarl run exp.yaml --local``): :func:`preflight` before any
training, then :meth:`Tracker.start` (or :meth:`Tracker.resume` with the run id saved in the
checkpoint), ``log_metrics`` every step, ``log_image`` for reasoning maps, ``finish`` at the end.
``sarl compare`` (:mod:`sarl.tracking.compare`) reads the runs back. Where runs go and the
preflight live in :mod:`sarl.tracking.store`, params in :mod:`sarl.tracking.params`; their public
names are re-exported here so callers import tracking from one place.

Everything goes through an explicit ``MlflowClient`` — never the fluent ``mlflow.start_run``
global — so two runs (or a run and a comparison) can live in one process.

Failures. ``start``/``resume`` bound MLflow's own HTTP retries (:func:`bound_http_retries`:
``MLFLOW_HTTP_REQUEST_TIMEOUT=30``, ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=3``,
``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR=1`` unless already set). On top of that, metrics that fail
to log stay queued and are sent with the next ``log_metrics`` call; after ``max_attempts``
consecutive failed calls (default 3) a :class:`TrackingError` is raised and training stops with
that one-line message. The checkpoint still names the run, so ``sarl run --resume`` continues the
same run. Re-sending a queued batch is safe: metrics keep their original timestamp and MLflow's
SQL store ignores exact duplicates (``SqlAlchemyStore._log_metrics``). Errors that retrying cannot
fix (invalid name, unknown run) raise at once. Artifact uploads and params get MLflow's bounded
retries only, then a :class:`TrackingError`.

Resumed training. A run resumed from its checkpoint at step N replays the steps after N that were
logged before the interruption, and MLflow cannot delete metric points; after
:meth:`Tracker.skip_logged_steps` a metric point at or below the last step the run already holds
for that metric is dropped, so the first value logged for a step stays and
``get_metric_history`` lists every step once.

Params and tags are redacted (:func:`sarl.spec.secrets.redact`) before they are sent: a spec with
a credential is refused by validation, this catches any that slips through.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from sarl.spec.secrets import redact
from sarl.tracking.params import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VALUE_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
    flatten_params,
    param_value,
)
from sarl.tracking.store import (
    HTTP_ENV_DEFAULTS,
    TrackingError,
    bound_http_retries,
    default_tracking_uri,
    error_code,
    guarded,
    local_artifact_location,
    make_client,
    one_line,
    preflight,
    run_url,
    sqlite_path,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

_LOG = logging.getLogger(__name__)

SPEC_ARTIFACT = "spec/experiment.yaml"
STUDY_SPEC_ARTIFACT = "spec/study.yaml"
RunStatus = Literal["FINISHED", "FAILED", "KILLED"]

# MLflow error codes that mean "this request is wrong", not "the server is having a bad moment".
_PERMANENT = frozenset(
    {
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_DOES_NOT_EXIST",
        "RESOURCE_ALREADY_EXISTS",
        "INVALID_STATE",
        "BAD_REQUEST",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
    }
)
# MLflow's metric/param name alphabet on POSIX (validate_param_and_metric_name).
_VALID_NAME = re.compile(r"^[/\w.\- :]*$")
_T = TypeVar("_T")


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _ensure_experiment(client: MlflowClient, uri: str, name: str) -> str:
    """The id of experiment ``name``, created (with a local artifact folder for SQLite) if new."""
    experiment = guarded(
        uri, f"looking up experiment {name!r}", lambda: client.get_experiment_by_name(name)
    )
    if experiment is None:
        try:
            return str(
                client.create_experiment(name, artifact_location=local_artifact_location(uri))
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
    return str(experiment.experiment_id)


def _check_metric_name(key: str) -> None:
    # Checked here rather than by the server so a typo fails at once instead of being retried.
    if not _VALID_NAME.match(key) or not key or len(key) > 250:
        raise ValueError(
            f"metric name {key!r} is not valid in MLflow (letters, digits, _ - . / : and spaces, "
            "at most 250 characters); see sarl.tracking.metrics.metric_key"
        )


# -- the run ---------------------------------------------------------------------------------------


class Tracker:
    """One MLflow run of one experiment. Create it with :meth:`start` or :meth:`resume`.

    As a context manager it finishes the run on exit: ``FINISHED``, ``KILLED`` after Ctrl-C,
    ``FAILED`` after any other exception (which is never masked by a tracking error).
    """

    def __init__(
        self,
        client: MlflowClient,
        uri: str,
        experiment_id: str,
        run_id: str,
        *,
        max_attempts: int = 3,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self._client = client
        self.uri = uri
        self.experiment_id = experiment_id
        self._run_id = run_id
        self._max_attempts = max_attempts
        self._pending: list[Metric] = []
        self._failures = 0  # consecutive failed attempts to send the queued metrics
        self._logged: dict[str, int] = {}  # metric -> last step held before skip_logged_steps

    @classmethod
    def start(
        cls,
        uri: str,
        experiment_name: str,
        run_name: str,
        *,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        spec_yaml: str,
        spec_artifact: str = SPEC_ARTIFACT,
        max_attempts: int = 3,
    ) -> Tracker:
        """Create a run (and the experiment if missing), log ``params`` and the spec YAML.

        ``params`` are usually ``flatten_params(spec)``; the spec lands at ``spec_artifact``
        (``spec/experiment.yaml``; a Study's parent run stores ``spec/study.yaml``).
        If logging them fails the new run is marked ``FAILED`` before the error is raised.
        """
        bound_http_retries()
        client = make_client(uri)
        experiment_id = _ensure_experiment(client, uri, experiment_name)
        run = guarded(
            uri,
            f"creating run {run_name!r}",
            lambda: client.create_run(experiment_id, run_name=run_name, tags=redact(tags or {})),
        )
        tracker = cls(client, uri, experiment_id, run.info.run_id, max_attempts=max_attempts)
        try:
            tracker._log_params(params or {})
            tracker.log_text(spec_yaml, spec_artifact)
        except TrackingError:
            tracker._terminate_quietly("FAILED")
            raise
        return tracker

    @classmethod
    def resume(cls, uri: str, run_id: str, *, max_attempts: int = 3) -> Tracker:
        """Continue an existing run (status back to ``RUNNING``); metrics append to its history."""
        bound_http_retries()
        client = make_client(uri)
        try:
            run = client.get_run(run_id)
        except Exception as e:
            if error_code(e) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise TrackingError(f"cannot resume: no run {run_id!r} at {uri}") from e
            raise TrackingError(f"cannot resume run {run_id!r} at {uri}: {one_line(e)}") from e
        if run.info.lifecycle_stage == "deleted":
            raise TrackingError(f"cannot resume: run {run_id!r} at {uri} is deleted")
        guarded(uri, f"reopening run {run_id}", lambda: client.update_run(run_id, status="RUNNING"))
        return cls(client, uri, run.info.experiment_id, run_id, max_attempts=max_attempts)

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def run_url(self) -> str | None:
        """The run's page in the MLflow UI when tracking to an HTTP server, else ``None``."""
        return run_url(self.uri, self.experiment_id, self._run_id)

    @property
    def pending_metrics(self) -> int:
        """Metrics queued after a failed attempt, sent with the next ``log_metrics``/``finish``."""
        return len(self._pending)

    def log_metrics(self, metrics: Mapping[str, float | None], step: int) -> None:
        """Log ``metrics`` at ``step``; ``None`` and NaN values are skipped.

        A transient failure queues the metrics for the next call (see the module docstring);
        :class:`TrackingError` after ``max_attempts`` consecutive failures or a rejected request.
        """
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        for key, value in metrics.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                # numpy scalars pass (np.float64 is a float; others convert below)
                try:
                    value = float(value)
                except (TypeError, ValueError) as e:
                    raise TypeError(f"metric {key!r}: {value!r} is not a number") from e
            if math.isnan(value) or (key in self._logged and step <= self._logged[key]):
                continue
            _check_metric_name(key)
            self._pending.append(Metric(key, float(value), now_ms, step))
        self._flush(attempts=1)

    def skip_logged_steps(self) -> dict[str, int]:
        """From now on drop metric points at or below the last step the run holds for their
        metric (see the module docstring); returns those steps, metric -> last logged step.

        Reads the run's metric history once (one request per metric).
        """
        run = guarded(
            self.uri, f"reading run {self._run_id}", partial(self._client.get_run, self._run_id)
        )
        last: dict[str, int] = {}
        for key in run.data.metrics:
            history = guarded(
                self.uri,
                f"reading the history of {key!r} in run {self._run_id}",
                partial(self._client.get_metric_history, self._run_id, key),
            )
            if history:
                last[key] = max(m.step for m in history)
        self._logged = last
        return dict(last)

    def log_image(self, path: Path, artifact_dir: str = "maps") -> None:
        """Upload an image file (e.g. a reasoning-map PNG) under ``artifact_dir``."""
        self.log_artifact(path, artifact_dir)

    def log_artifact(self, path: Path, artifact_dir: str | None = None) -> None:
        """Upload a file, or a folder's contents, under ``artifact_dir`` (the root if ``None``)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"artifact {path} does not exist")
        upload = self._client.log_artifacts if path.is_dir() else self._client.log_artifact
        guarded(
            self.uri,
            f"uploading {path.name} to run {self._run_id}",
            partial(upload, self._run_id, str(path), artifact_dir),
        )

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        """Store ``data`` as JSON (``.json``) or YAML (``.yaml``/``.yml``) at ``artifact_file``."""
        guarded(
            self.uri,
            f"uploading {artifact_file} to run {self._run_id}",
            lambda: self._client.log_dict(self._run_id, dict(data), artifact_file),
        )

    def log_text(self, text: str, artifact_file: str) -> None:
        """Store ``text`` at ``artifact_file`` (e.g. ``spec/experiment.yaml``)."""
        guarded(
            self.uri,
            f"uploading {artifact_file} to run {self._run_id}",
            lambda: self._client.log_text(self._run_id, text, artifact_file),
        )

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set (or overwrite) run tags."""
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)) for k, v in redact(tags).items()]
        for batch in _chunks(items, MAX_PARAMS_TAGS_PER_BATCH):
            guarded(
                self.uri,
                f"setting tags of run {self._run_id}",
                partial(self._client.log_batch, self._run_id, tags=list(batch)),
            )

    def finish(self, status: RunStatus = "FINISHED") -> None:
        """Send queued metrics (up to ``max_attempts`` tries), then close the run with ``status``.

        If queued metrics cannot be sent the run is still closed (best effort) and the
        :class:`TrackingError` is raised.
        """
        if status not in ("FINISHED", "FAILED", "KILLED"):
            raise ValueError(f"status must be FINISHED, FAILED or KILLED, got {status!r}")
        try:
            self._flush(attempts=self._max_attempts)
        except TrackingError:
            self._terminate_quietly(status)
            raise
        guarded(
            self.uri,
            f"closing run {self._run_id}",
            lambda: self._client.set_terminated(self._run_id, status),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish("FINISHED")
            return
        status: RunStatus = "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
        try:
            self.finish(status)
        except TrackingError as e:  # the training error matters more; keep it
            _LOG.warning("could not close run %s cleanly: %s", self._run_id, e)

    # -- internals ---------------------------------------------------------------------------------

    def _log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, param_value(v)) for k, v in redact(params).items()]
        for batch in _chunks(items, MAX_PARAMS_TAGS_PER_BATCH):
            guarded(
                self.uri,
                f"logging params of run {self._run_id}",
                partial(self._client.log_batch, self._run_id, params=list(batch)),
            )

    def _flush(self, attempts: int) -> None:
        """Send the queue in MLflow-sized batches; up to ``attempts`` tries in this call."""
        while self._pending:
            batch = self._pending[:MAX_METRICS_PER_BATCH]
            try:
                self._client.log_batch(self._run_id, metrics=batch)
            except Exception as e:
                self._count_failure(e)  # raises when retrying cannot help or is used up
                attempts -= 1
                if attempts <= 0:
                    return
                continue
            del self._pending[: len(batch)]
            self._failures = 0

    def _count_failure(self, error: Exception) -> None:
        where = f"run {self._run_id} at {self.uri}"
        if error_code(error) in _PERMANENT:
            raise TrackingError(
                f"tracking: MLflow rejected metrics for {where}: {one_line(error)}"
            ) from error
        self._failures += 1
        if self._failures >= self._max_attempts:
            raise TrackingError(
                f"tracking: {len(self._pending)} metrics not logged to {where} after "
                f"{self._failures} attempts: {one_line(error)}"
            ) from error
        _LOG.warning(
            "logging metrics to %s failed (attempt %d of %d); %d metrics kept for the next try: %s",
            where,
            self._failures,
            self._max_attempts,
            len(self._pending),
            one_line(error),
        )

    def _terminate_quietly(self, status: RunStatus) -> None:
        try:
            self._client.set_terminated(self._run_id, status)
        except Exception as e:  # already failing; the caller raises the first error
            _LOG.warning("could not mark run %s %s: %s", self._run_id, status, one_line(e))


__all__ = [
    "HTTP_ENV_DEFAULTS",
    "MAX_METRICS_PER_BATCH",
    "MAX_PARAMS_TAGS_PER_BATCH",
    "MAX_PARAM_VALUE_LENGTH",
    "SPEC_ARTIFACT",
    "RunStatus",
    "Tracker",
    "TrackingError",
    "bound_http_retries",
    "default_tracking_uri",
    "flatten_params",
    "local_artifact_location",
    "param_value",
    "preflight",
    "run_url",
    "sqlite_path",
]
