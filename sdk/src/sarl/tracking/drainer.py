"""Send a run's spooled records to MLflow in order, in the background, for as long as it takes.

Started by :class:`sarl.tracking.tracker.Tracker` for its run (one daemon thread), and run in the
foreground by ``sarl tracking flush DIR`` (:func:`flush`). The records come from
:class:`sarl.tracking.spool.Spool`; each batch MLflow accepts is acknowledged there durably, so a
crash re-sends at most one batch, which MLflow does not duplicate (see the spool's docstring).

An outage never stops training: a failed send is retried with a backoff (``retry_min_s`` doubling
up to ``retry_max_s``), with no attempt limit, and one warning line says how long MLflow has been
away and how many records wait, at the first failure and every ``report_every_s``. A request MLflow
rejects (:data:`PERMANENT` error codes: a deleted run, an invalid value) cannot succeed by retrying:
its records are logged as an error, dropped and counted in :attr:`Drainer.rejected`.

Settings come from :class:`DrainSettings` (defaults below; ``SARL_TRACKING_RETRY_MAX_S``,
``SARL_TRACKING_REPORT_EVERY_S`` and ``SARL_TRACKING_FINISH_WAIT_S`` override them).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from sarl.tracking.params import MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH
from sarl.tracking.spool import Record, Spool
from sarl.tracking.store import error_code, one_line

if TYPE_CHECKING:
    from mlflow import MlflowClient

_LOG = logging.getLogger("sarl.tracking")
_T = TypeVar("_T")

# MLflow error codes that mean "this request is wrong", not "the server is having a bad moment".
PERMANENT = frozenset(
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


@dataclass(frozen=True)
class DrainSettings:
    """How the drainer retries and reports; ``finish_wait_s`` bounds the wait at a run's end."""

    retry_min_s: float = 1.0
    retry_max_s: float = 30.0
    report_every_s: float = 60.0
    finish_wait_s: float = 120.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DrainSettings:
        env = os.environ if environ is None else environ
        base = cls()

        def number(name: str, default: float) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError as e:
                raise ValueError(f"{name}={raw!r} is not a number of seconds") from e
            if value < 0:
                raise ValueError(f"{name}={raw!r} must be >= 0")
            return value

        retry_max_s = number("SARL_TRACKING_RETRY_MAX_S", base.retry_max_s)
        return cls(
            retry_min_s=min(base.retry_min_s, retry_max_s),
            retry_max_s=retry_max_s,
            report_every_s=number("SARL_TRACKING_REPORT_EVERY_S", base.report_every_s),
            finish_wait_s=number("SARL_TRACKING_FINISH_WAIT_S", base.finish_wait_s),
        )


class Drainer:
    """The sender thread of one spool. :meth:`wake` after an append; :meth:`drain` to wait."""

    def __init__(
        self, spool: Spool, client: MlflowClient, settings: DrainSettings | None = None
    ) -> None:
        self.spool = spool
        self.settings = settings or DrainSettings.from_env()
        self.rejected = 0
        self.failures = 0  # failed sends so far (each retried)
        self._client = client
        self._where = f"MLflow at {spool.tracking_uri}"
        self._cond = threading.Condition()
        self._stop = False
        self._down_since: float | None = None
        self._last_report = 0.0
        self._thread = threading.Thread(target=self._run, name="sarl-tracking", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def drain(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every record to be acknowledged; returns how many wait."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while self.spool.waiting and not self._stop and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 1.0))
        return self.spool.waiting

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the thread; a send in flight is left to finish or die with the process (unacked,
        so it is sent again later and not duplicated)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        delay = self.settings.retry_min_s
        while True:
            with self._cond:
                while not self._stop and not self.spool.waiting:
                    self._cond.wait()
                if self._stop:
                    return
            try:
                self._send_next()
            except Exception as e:  # transient: the server is away; keep the records
                self._note_failure(e)
                with self._cond:
                    self._cond.wait(delay)
                delay = min(max(delay * 2, self.settings.retry_min_s), self.settings.retry_max_s)
                continue
            delay = self.settings.retry_min_s
            self._note_success()
            with self._cond:
                self._cond.notify_all()  # drain() waiters

    def _send_next(self) -> None:
        """Send the oldest batch and acknowledge it; raises on a transient failure."""
        batch = _next_batch(self.spool.pending())
        try:
            if batch[0].kind == "metrics":
                self._send_metrics(batch)
            else:
                self._send(batch[0])
        except Exception as e:
            if error_code(e) not in PERMANENT:
                raise
            self.rejected += len(batch)
            _LOG.error(
                "tracking: %s rejected %d record(s) of run %s (dropped): %s",
                self._where,
                len(batch),
                self.spool.run_id,
                one_line(e),
            )
        self.spool.ack(batch[-1].pos)

    def _send_metrics(self, batch: Sequence[Record]) -> None:
        # Each point keeps the timestamp it was spooled with, so a re-send is an exact duplicate.
        from mlflow.entities import Metric

        metrics = [
            Metric(key, float(value), int(ts), int(record.body["step"]))
            for record in batch
            for key, value, ts in record.body["metrics"]
        ]
        for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):  # one record may hold more
            self._client.log_batch(self.spool.run_id, metrics=list(chunk))

    def _send(self, record: Record) -> None:
        from mlflow.entities import RunTag

        run_id = self.spool.run_id
        body = record.body
        if record.kind == "tags":
            tags = [RunTag(k, str(v)) for k, v in body["tags"].items()]
            for part in _chunks(tags, MAX_PARAMS_TAGS_PER_BATCH):
                self._client.log_batch(run_id, tags=list(part))
        elif record.kind == "artifact":
            path = self.spool.artifact_path(record)
            if not path.exists():
                # The spool frees a copy only after noting the record as sent, so this record
                # was sent before and its acknowledgement is what got lost: nothing to do.
                _LOG.info("tracking: artifact of record %s sent before; skipped", record.id)
                return
            upload = self._client.log_artifacts if path.is_dir() else self._client.log_artifact
            upload(run_id, str(path), body.get("dir"))
        elif record.kind == "status":
            self._client.set_terminated(run_id, str(body["status"]))
        else:
            _LOG.error("tracking: unknown spool record kind %r skipped", record.kind)

    def _note_failure(self, error: Exception) -> None:
        self.failures += 1
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        elif now - self._last_report < self.settings.report_every_s:
            return
        self._last_report = now
        _LOG.warning(
            "tracking: %s not answering for %.0f s (%s); %d records spooled in %s, training "
            "goes on",
            self._where,
            now - self._down_since,
            one_line(error, 120),
            self.spool.waiting,
            self.spool.root,
        )

    def _note_success(self) -> None:
        if self._down_since is None:
            return
        _LOG.warning(
            "tracking: %s answers again after %.0f s; sending %d spooled records",
            self._where,
            time.monotonic() - self._down_since,
            self.spool.waiting,
        )
        self._down_since = None


def _next_batch(pending: Sequence[Record]) -> list[Record]:
    """The oldest record, plus the metric records after it while one ``log_batch`` holds them."""
    batch = [pending[0]]
    if batch[0].kind != "metrics":
        return batch
    count = len(batch[0].body["metrics"])
    for record in pending[1:]:
        size = len(record.body["metrics"]) if record.kind == "metrics" else 0
        if record.kind != "metrics" or count + size > MAX_METRICS_PER_BATCH:
            break
        batch.append(record)
        count += size
    return batch


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def flush(spool: Spool, client: MlflowClient, timeout_s: float) -> tuple[int, int]:
    """Send what ``spool`` holds within ``timeout_s``: (records still waiting, records rejected).
    For ``sarl tracking flush``."""
    drainer = Drainer(spool, client)
    drainer.start()
    try:
        left = drainer.drain(timeout_s)
    finally:
        drainer.stop()
    return left, drainer.rejected


__all__ = ["PERMANENT", "DrainSettings", "Drainer", "Record", "flush"]
