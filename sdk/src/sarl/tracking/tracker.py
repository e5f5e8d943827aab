"""Experiment tracking on MLflow: one run per experiment, logged through ``MlflowClient``.

Called by the local runner (``sarl run exp.yaml --local``): :func:`preflight` before any
training, then :meth:`Tracker.start` (or :meth:`Tracker.resume` with the run id saved in the
checkpoint), ``log_metrics`` every step, ``log_image`` for reasoning maps, ``finish`` at the end.
``sarl compare`` (:mod:`sarl.tracking.compare`) reads the runs back. Where runs go and the
preflight live in :mod:`sarl.tracking.store`, params in :mod:`sarl.tracking.params`, creating the
experiment and run in :mod:`sarl.tracking.run_setup`; the public names of store and params
are re-exported here so callers import tracking from one place. What the MLflow UI shows
of them (the experiment kind "model training", descriptions, a Study run's ``arm``/``seed``
params) is decided in :mod:`sarl.tracking.describe`.

Everything goes through an explicit ``MlflowClient`` — never the fluent ``mlflow.start_run``
global — so two runs (or a run and a comparison) can live in one process.

Outages never stop training and lose nothing. ``start``/``resume`` talk to MLflow directly (the
run is created, reopened, its params logged: a server that is away then fails the start with one
line) and bound MLflow's own HTTP retries (:func:`bound_http_retries`). After that every metric,
tag and artifact is first written to the run's durable spool (:mod:`sarl.tracking.spool`: an
fsynced append-only file in ``spool_dir``) and sent by a background thread
(:mod:`sarl.tracking.drainer`) in order, retried without limit, each accepted batch acknowledged
in the spool; a re-sent metric keeps its timestamp and MLflow keeps one row per (key, timestamp,
step, value), so it is not duplicated. :attr:`Tracker.waiting` says how many records wait;
:meth:`Tracker.snapshot` writes the unsent tail into a checkpoint before it is stored, and
:meth:`Tracker.resume` adopts a checkpoint's tail (``carried``), so a resume on another machine
sends what the lost one could not. :meth:`finish` queues the run's status, waits up to
``finish_wait_s`` for the drain and returns either way; what is left stays in the spool, sent
by ``sarl tracking flush <spool dir>`` (:attr:`Tracker.left` tells how many). Invalid metric
names and values raise at once (before spooling); a record MLflow refuses for its content is kept in
the spool's ``rejected.jsonl`` and counted (:attr:`Tracker.rejected`, the closing line); a run that
MLflow lost keeps its records for ``sarl tracking flush --new-run`` (:mod:`sarl.tracking.drainer`
sorts the failures).

Resumed training. A run resumed from its checkpoint at step N replays the steps after N that were
logged before the interruption, and MLflow cannot delete metric points; after
:meth:`Tracker.skip_logged_steps` a metric point at or below the last step the run already holds
for that metric (in MLflow, or still waiting in the spool) is dropped, so the first value logged
for a step stays and ``get_metric_history`` lists every step once.

Params and tags are redacted (:func:`sarl.spec.secrets.redact`) before they are sent: a spec with
a credential is refused by validation, this catches any that slips through.
"""

from __future__ import annotations

import json
import logging
import math
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from sarl.spec.secrets import redact
from sarl.tracking import describe
from sarl.tracking.describe import NOTE_TAG
from sarl.tracking.drainer import Drainer, DrainSettings, closing_line
from sarl.tracking.params import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VALUE_LENGTH,
    MAX_PARAMS_TAGS_PER_BATCH,
    flatten_params,
    param_value,
)
from sarl.tracking.run_setup import ensure_experiment, log_params, resumed_run_info, run_info
from sarl.tracking.spool import Spool
from sarl.tracking.spool_records import INT64_MAX, INT64_MIN
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

    from sarl.spec.experiment import Experiment

_LOG = logging.getLogger(__name__)

SPEC_ARTIFACT = "spec/experiment.yaml"
STUDY_SPEC_ARTIFACT = "spec/study.yaml"
RunStatus = Literal["FINISHED", "FAILED", "KILLED"]
#: Where a run's spool goes when the caller names no folder: ``<this>/<run id>``.
DEFAULT_SPOOL_ROOT = Path(".sarl") / "spool"
#: How long a run that stops on an error or a signal waits for its spool to drain.
ABORT_WAIT_S = 10.0
# MLflow's metric/param name alphabet on POSIX (validate_param_and_metric_name).
_VALID_NAME = re.compile(r"^[/\w.\- :]*$")


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

    ``spool_dir`` is the run's spool (``start``/``resume``: ``<spool_root>/<run id>``, by default
    ``.sarl/spool/<run id>``); ``settings`` how its
    drainer retries and how long :meth:`finish` waits (default: :meth:`DrainSettings.from_env`).
    """

    def __init__(
        self,
        client: MlflowClient,
        uri: str,
        experiment_id: str,
        run_id: str,
        *,
        spool_dir: Path | None = None,
        settings: DrainSettings | None = None,
        run_info: Mapping[str, Any] | None = None,
    ) -> None:
        self._client = client
        self.uri = uri
        self.experiment_id = experiment_id
        self._run_id = run_id
        # run_info goes to the spool's header: what makes the run again if MLflow loses it.
        self.spool = Spool(spool_dir or DEFAULT_SPOOL_ROOT / run_id, run_id, uri, run_info=run_info)
        self._drainer = Drainer(self.spool, client, settings)
        self._drainer.start()
        self._logged: dict[str, int] = {}  # metric -> last step held before skip_logged_steps
        self.left = 0  # records still spooled when finish() stopped waiting
        self._finished = False

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
        spool_root: Path | None = None,
        settings: DrainSettings | None = None,
        description: str | None = None,
        experiment_description: str | None = None,
    ) -> Tracker:
        """Create a run (and the experiment if missing), log ``params`` and the spec YAML.

        ``params`` are usually ``flatten_params(spec)``; the spec lands at ``spec_artifact``
        (``spec/experiment.yaml``; a Study's parent run stores ``spec/study.yaml``).
        ``description`` is the run's description in MLflow (tag ``mlflow.note.content``; a
        description in ``tags`` wins); ``experiment_description`` that of an experiment
        this creates (default: :func:`~sarl.tracking.describe.experiment_description`).
        If logging the params fails the new run is marked ``FAILED`` before the error is raised;
        the spec goes through the spool like every artifact.
        """
        bound_http_retries()
        client = make_client(uri)
        about = experiment_description or describe.experiment_description(experiment_name)
        experiment_id = ensure_experiment(client, uri, experiment_name, about)
        run_tags = {**({NOTE_TAG: description} if description else {}), **(tags or {})}
        run = guarded(
            uri,
            f"creating run {run_name!r}",
            lambda: client.create_run(experiment_id, run_name=run_name, tags=redact(run_tags)),
        )
        run_id = run.info.run_id
        try:
            log_params(client, uri, run_id, params or {})
        except TrackingError:
            _terminate_quietly(client, run_id, "FAILED")
            raise
        tracker = cls(
            client,
            uri,
            experiment_id,
            run_id,
            spool_dir=(spool_root or DEFAULT_SPOOL_ROOT) / run_id,
            settings=settings,
            run_info=run_info(experiment_name, run_name, redact(run_tags), params or {}),
        )
        tracker.log_text(spec_yaml, spec_artifact)
        return tracker

    @classmethod
    def start_experiment(
        cls,
        uri: str,
        exp: Experiment,
        *,
        backend: str,
        spool_root: Path | None = None,
        settings: DrainSettings | None = None,
    ) -> Tracker:
        """A new run of the Experiment ``exp``, as sarl's trainers start one (tag
        ``sarl.backend=<backend>``): named after it, in MLflow experiment
        ``tracking.experiment_name`` (default: its name), with ``tracking.tags``, the redacted
        spec's allow-listed fields (:mod:`sarl.spec.loggable`) flattened as params (plus
        ``arm`` and ``seed`` for a Study's run) and stored at
        ``spec/experiment.yaml``, and a description saying what it is."""
        from sarl.spec.loggable import logged_experiment
        from sarl.tracking.describe import run_description, study_run_params

        params, spec_yaml = logged_experiment(exp.model_dump(mode="json"))  # issue 38 item 8
        tracking = exp.spec.tracking
        return cls.start(
            uri,
            tracking.experiment_name or exp.name,
            exp.name,
            tags={**tracking.tags, "sarl.backend": backend},
            params={**flatten_params(params), **study_run_params(tracking.tags)},
            spec_yaml=spec_yaml,
            spool_root=spool_root,
            settings=settings,
            description=run_description(exp),
        )

    @classmethod
    def resume(
        cls,
        uri: str,
        run_id: str,
        *,
        spool_root: Path | None = None,
        carried: Sequence[Path] = (),
        settings: DrainSettings | None = None,
    ) -> Tracker:
        """Continue an existing run (status back to ``RUNNING``); metrics append to its history.

        The run's spool at ``spool_root/<run id>`` keeps what it holds; the unsent records of
        each spool in ``carried`` (a checkpoint's tail, :meth:`snapshot`) are added to it, so
        they are sent too.
        """
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
        tracker = cls(
            client,
            uri,
            run.info.experiment_id,
            run_id,
            spool_dir=(spool_root or DEFAULT_SPOOL_ROOT) / run_id,
            settings=settings,
            run_info=resumed_run_info(client, run),
        )
        for tail in carried:
            if (tail / "spool.json").is_file() and tracker.spool.adopt(tail):
                tracker._drainer.wake()
        return tracker

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def run_url(self) -> str | None:
        """The run's page in the MLflow UI when tracking to an HTTP server, else ``None``."""
        return run_url(self.uri, self.experiment_id, self._run_id)

    @property
    def waiting(self) -> int:
        """Records (a step's metrics, tags, an artifact) spooled and not yet accepted by MLflow."""
        return self.spool.waiting

    @property
    def spool_dir(self) -> Path:
        return self.spool.root

    @property
    def settings(self) -> DrainSettings:
        """How the drainer retries and how long :meth:`finish` waits."""
        return self._drainer.settings

    def snapshot(self, dest: Path) -> int:
        """Write the unsent records (and their artifacts) as a spool at ``dest`` — called before
        a checkpoint holding ``dest`` is stored; returns how many records."""
        return self.spool.snapshot(dest)

    def drain(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for the spool to empty; returns how many records still wait."""
        return self._drainer.drain(timeout_s)

    def log_metrics(self, metrics: Mapping[str, float | None], step: int) -> None:
        """Spool ``metrics`` at ``step`` (one fsynced record) for the drainer to send; ``None``
        and NaN values are skipped. Never waits for MLflow (see the module docstring)."""
        if not INT64_MIN <= int(step) <= INT64_MAX:
            raise ValueError(f"step {step} is outside MLflow's int64 steps")
        now_ms = int(time.time() * 1000)
        points: list[tuple[str, float, int]] = []
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
            points.append((key, float(value), now_ms))
        if points:
            self.spool.append("metrics", {"step": int(step), "metrics": points})
            self._drainer.wake()

    def skip_logged_steps(self) -> dict[str, int]:
        """From now on drop metric points at or below the last step the run holds for their
        metric, in MLflow or waiting in the spool (see the module docstring); returns those
        steps, metric -> last logged step.

        Reads the run's metric history once (one request per metric).
        """
        # The spool first: its sender may deliver (and ack) a record meanwhile, which the MLflow
        # read below then sees; read the other way round, such a record would be in neither.
        last: dict[str, int] = {}
        for record in self.spool.pending():
            if record.kind == "metrics":
                step = int(record.body["step"])
                for key, _, _ in record.body["metrics"]:
                    last[key] = max(last.get(key, step), step)
        run = guarded(
            self.uri, f"reading run {self._run_id}", partial(self._client.get_run, self._run_id)
        )
        for key in run.data.metrics:
            history = guarded(
                self.uri,
                f"reading the history of {key!r} in run {self._run_id}",
                partial(self._client.get_metric_history, self._run_id, key),
            )
            if history:
                last[key] = max(last.get(key, 0), *(m.step for m in history))
        self._logged = last
        return dict(last)

    def log_image(self, path: Path, artifact_dir: str = "maps") -> None:
        """Upload an image file (e.g. a reasoning-map PNG) under ``artifact_dir``."""
        self.log_artifact(path, artifact_dir)

    def log_artifact(self, path: Path, artifact_dir: str | None = None) -> None:
        """Upload a file, or a folder's contents, under ``artifact_dir`` (the root if ``None``);
        a copy is spooled first, so ``path`` may change once this returns."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"artifact {path} does not exist")
        self.spool.append("artifact", {"dir": artifact_dir}, artifact=path)
        self._drainer.wake()

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        """Store ``data`` as YAML (``.yaml``/``.yml``) or else JSON at ``artifact_file``."""
        import yaml

        if Path(artifact_file).suffix in (".yaml", ".yml"):
            text = yaml.safe_dump(dict(data), sort_keys=False)
        else:
            text = json.dumps(dict(data), indent=2)
        self.log_text(text, artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        """Store ``text`` at ``artifact_file`` (e.g. ``spec/experiment.yaml``)."""
        where = Path(artifact_file)
        with tempfile.TemporaryDirectory(prefix="sarl-artifact-") as tmp:
            path = Path(tmp) / where.name
            path.write_text(text, encoding="utf-8")
            self.log_artifact(path, where.parent.as_posix() if where.parent.parts else None)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set (or overwrite) run tags."""
        self.spool.append("tags", {"tags": {k: str(v) for k, v in redact(tags).items()}})
        self._drainer.wake()

    def finish(self, status: RunStatus = "FINISHED", wait_s: float | None = None) -> None:
        """Spool the run's ``status``, wait up to ``wait_s`` (default ``finish_wait_s``) for
        everything to be sent, and stop the drainer. Records still waiting then stay in the spool
        (:attr:`left`; one warning line names ``sarl tracking flush``); the run is closed when
        they are sent. A second call does nothing."""
        if status not in ("FINISHED", "FAILED", "KILLED"):
            raise ValueError(f"status must be FINISHED, FAILED or KILLED, got {status!r}")
        if self._finished:
            return
        self._finished = True
        # The end time is now, even if MLflow only gets the record after an outage.
        self.spool.append("status", {"status": status, "end_time": int(time.time() * 1000)})
        wait_s = self._drainer.settings.finish_wait_s if wait_s is None else wait_s
        self.left = self._drainer.drain(wait_s)
        self._drainer.stop()
        self.spool.close()
        if self.left:
            _LOG.warning(
                "tracking: %d records of run %s still spooled in %s; MLflow at %s did not take "
                "them within %.0f s. Send them with: sarl tracking flush %s",
                self.left,
                self._run_id,
                self.spool.root,
                self.uri,
                wait_s,
                self.spool.root,
            )

    @property
    def rejected(self) -> int:
        """Records MLflow refused for their content (kept in the spool's ``rejected.jsonl``)."""
        return self._drainer.rejected

    @property
    def quarantined(self) -> int:
        """Records that could not be sent as they were (kept in ``quarantine.jsonl``)."""
        return self._drainer.quarantined

    def closing_line(self) -> str:
        """The line a training job prints when its tracker is finished: every record delivered,
        or how many are still spooled (and why) and the command that sends them, and how many
        MLflow refused (:func:`sarl.tracking.drainer.closing_line`)."""
        return closing_line(self._drainer, self.left)

    def abandon(self) -> None:
        """Stop sending and let go of the spool without closing the run, as a process that dies
        does: what is unsent stays spooled for the next :meth:`resume` or
        ``sarl tracking flush`` (a run handed to another process; crash tests)."""
        self._finished = True
        self._drainer.stop()
        self.spool.close()

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
            # Stopping on an error or a signal: a short wait, the spool keeps the rest.
            self.finish(status, wait_s=min(ABORT_WAIT_S, self._drainer.settings.finish_wait_s))
        except TrackingError as e:  # the training error matters more; keep it
            _LOG.warning("could not close run %s cleanly: %s", self._run_id, e)


def _terminate_quietly(client: MlflowClient, run_id: str, status: RunStatus) -> None:
    try:
        client.set_terminated(run_id, status)
    except Exception as e:  # already failing; the caller raises the first error
        _LOG.warning("could not mark run %s %s: %s", run_id, status, one_line(e))


__all__ = [
    "DEFAULT_SPOOL_ROOT",
    "HTTP_ENV_DEFAULTS",
    "MAX_METRICS_PER_BATCH",
    "MAX_PARAMS_TAGS_PER_BATCH",
    "MAX_PARAM_VALUE_LENGTH",
    "SPEC_ARTIFACT",
    "DrainSettings",
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
