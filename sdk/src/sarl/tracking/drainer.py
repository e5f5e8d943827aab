"""Send a run's spooled records to MLflow in order, in the background, for as long as it takes.

Started by :class:`sarl.tracking.tracker.Tracker` for its run (one daemon thread), and run in the
foreground by ``sarl tracking flush DIR`` (:func:`flush`). The records come from
:class:`sarl.tracking.spool.Spool`; a record is acknowledged there, durably, only once MLflow has
it, so a crash re-sends at most one batch, which MLflow does not duplicate (see the spool's
docstring).

A failed send is sorted by what MLflow's error code means (:func:`classify`):

* **away** — no answer, a 5xx, and also ``PERMISSION_DENIED``/``UNAUTHENTICATED``/``BAD_REQUEST``:
  MLflow's client gives those codes to any plain-text 403/401/400 (``verify_rest_response`` in
  ``mlflow/utils/rest_utils.py``, 3.17.2), which is what a gateway or an expired token answers,
  and the tracking API itself never refuses a run's data with ``BAD_REQUEST``. Retried with a
  backoff (``retry_min_s`` doubling up to ``retry_max_s``), without limit while training; one
  warning line says how long and why, at the first failure and every ``report_every_s``. The
  bound comes from whoever waits: :meth:`Tracker.finish` (``finish_wait_s``) or ``flush``'s
  timeout; then the records stay spooled and the caller says so and exits non-zero.
* **gone** — ``RESOURCE_DOES_NOT_EXIST``: the run (or its experiment) is not in MLflow any more,
  e.g. a server restored from a backup or started on a new database. Nothing is acknowledged;
  retries go on (a restore may bring the run back), waiting stops (:attr:`Drainer.gone`), and the
  records wait for ``sarl tracking flush DIR --new-run`` (:mod:`sarl.tracking.reattach`).
* **refused** — ``INVALID_PARAMETER_VALUE``, ``INVALID_STATE``, ``RESOURCE_ALREADY_EXISTS``: MLflow
  read the request and refused its content; retrying cannot help. A batch of several records is
  then sent one record at a time, so only the refused record goes to the spool's
  ``rejected.jsonl`` with MLflow's message (:attr:`Drainer.rejected`).
* **unsendable** — the client cannot even build the request (``ValueError``/``TypeError``/
  ``OverflowError``, e.g. a number out of range) or an artifact leads out of the spool: the
  record is quarantined (:attr:`Drainer.quarantined`), never a reason to hold back the next ones.

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
from typing import TYPE_CHECKING, Literal, TypeVar

from sarl.tracking.params import MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH
from sarl.tracking.spool import Spool, SpoolError
from sarl.tracking.spool_records import Record
from sarl.tracking.store import error_code, one_line

if TYPE_CHECKING:
    from mlflow import MlflowClient

_LOG = logging.getLogger("sarl.tracking")
_T = TypeVar("_T")

#: MLflow read the request and refused its content: retrying cannot help.
REFUSED = frozenset({"INVALID_PARAMETER_VALUE", "INVALID_STATE", "RESOURCE_ALREADY_EXISTS"})
#: The run or its experiment is not in MLflow (any more).
GONE = frozenset({"RESOURCE_DOES_NOT_EXIST"})
Verdict = Literal["away", "gone", "refused", "unsendable"]


def classify(error: BaseException) -> Verdict:
    """What a failed send means (see the module docstring); unknown failures count as away,
    so a record is never dropped on a guess."""
    code = error_code(error)
    if code in REFUSED:
        return "refused"
    if code in GONE:
        return "gone"
    if code is None and isinstance(error, ValueError | TypeError | OverflowError):
        return "unsendable"
    return "away"


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
        self.rejected = 0  # records MLflow refused, kept in the spool's rejected.jsonl
        self.failures = 0  # failed sends so far (each retried)
        self.gone = False  # the last send found the run missing from MLflow
        self.last_error = ""  # one line: why the last send failed ("" after a success)
        self._one_by_one = 0  # send records singly up to this pos (a refused batch is split)
        self._client = client
        self._where = f"MLflow at {spool.tracking_uri}"
        self._cond = threading.Condition()
        self._stop = False
        self._down_since: float | None = None
        self._last_report = 0.0
        self._thread = threading.Thread(target=self._run, name="sarl-tracking", daemon=True)

    @property
    def quarantined(self) -> int:
        """Records and damaged lines set aside in the spool's quarantine.jsonl by this process."""
        return self.spool.quarantined

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def drain(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every record to be acknowledged; returns how many wait.
        Returns early when the run is gone from MLflow (:attr:`gone`): waiting cannot help."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while (
                self.spool.waiting and not self.gone and not self._stop and self._thread.is_alive()
            ):
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
        """Send the oldest batch and acknowledge it, or set its refused or unsendable record
        aside; raises when MLflow is away or the run is gone (the records stay)."""
        pending = self.spool.pending()
        single = pending[0].pos <= self._one_by_one
        batch = pending[:1] if single else _next_batch(pending)
        try:
            if batch[0].kind == "metrics":
                self._send_metrics(batch)
            else:
                self._send(batch[0])
        except SpoolError as e:
            self._set_aside(batch[0], str(e), quarantine=True)
            return
        except Exception as e:
            verdict = classify(e)
            self.gone = verdict == "gone"
            if verdict == "away" or verdict == "gone":
                raise
            if len(batch) > 1:  # find the refused record(s): one at a time through this batch
                self._one_by_one = batch[-1].pos
                return
            self._set_aside(batch[0], one_line(e), quarantine=verdict == "unsendable")
            return
        self.gone = False
        self.spool.ack(batch[-1].pos)

    def _set_aside(self, record: Record, reason: str, *, quarantine: bool) -> None:
        if quarantine:
            self.spool.quarantine(record, reason)
            where = "quarantine.jsonl"
        else:
            self.spool.reject(record, reason)
            self.rejected += 1
            where = "rejected.jsonl"
        _LOG.error(
            "tracking: record %s (%s) of run %s not sent, kept in %s: %s",
            record.id,
            record.kind,
            self.spool.run_id,
            self.spool.root / where,
            reason,
        )

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
            # Checked: inside the spool, no links (SpoolError otherwise: quarantined).
            path = self.spool.artifact_path(record)
            if not path.exists():
                # The spool frees a copy only after noting the record as sent, so this record
                # was sent before and its acknowledgement is what got lost: nothing to do.
                _LOG.info("tracking: artifact of record %s sent before; skipped", record.id)
                return
            upload = self._client.log_artifacts if path.is_dir() else self._client.log_artifact
            upload(run_id, str(path), body.get("dir"))
        elif record.kind == "status":
            # The time the run ended, not the time the record got through an outage.
            end = body.get("end_time")
            self._client.set_terminated(run_id, str(body["status"]), end_time=end)
        else:
            _LOG.error("tracking: unknown spool record kind %r skipped", record.kind)

    def _note_failure(self, error: Exception) -> None:
        self.failures += 1
        self.last_error = self.explain(error)
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
            self.last_error,
            self.spool.waiting,
            self.spool.root,
        )

    def explain(self, error: BaseException) -> str:
        """One line on a failed send, with the fix where there is one."""
        code = error_code(error)
        if code in GONE:
            return (
                f"run {self.spool.run_id} no longer exists at {self.spool.tracking_uri} "
                f"({one_line(error, 120)}); its records stay in {self.spool.root}: send them to "
                f"a new run of the same name with: sarl tracking flush {self.spool.root} --new-run"
            )
        if code in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
            return (
                f"MLflow refused the credentials ({one_line(error, 120)}); check "
                "MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD, "
                "or the gateway in front of MLflow"
            )
        return one_line(error, 160)

    def _note_success(self) -> None:
        self.last_error = ""
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


def closing_line(drainer: Drainer, left: int) -> str:
    """What a run's tracking came to, in one line (:meth:`Tracker.closing_line`): every record
    delivered, or how many are still spooled and why, with the command that sends them, and how
    many were refused or damaged and where they are kept."""
    root, run_id = drainer.spool.root, drainer.spool.run_id
    aside = ""
    if drainer.rejected or drainer.quarantined:
        aside = (
            f"; {drainer.rejected} records refused by MLflow (kept in {root / 'rejected.jsonl'})"
            f" and {drainer.quarantined} damaged (kept in {root / 'quarantine.jsonl'})"
        )
    if not left:
        if aside:
            return f"tracking: run {run_id} is NOT complete in MLflow" + aside
        return (
            f"tracking: every record of run {run_id} reached MLflow; the spool "
            f"{root} keeps those up to the last checkpoint for a resume"
        )
    if drainer.gone:
        return f"tracking: {left} records kept: {drainer.last_error}" + aside
    why = f" ({drainer.last_error})" if drainer.last_error else ""
    return (
        f"tracking: {left} records of run {run_id} still spooled in {root}{why} (those up to "
        f"the last checkpoint are also in it); send them with: sarl tracking flush {root}" + aside
    )


@dataclass(frozen=True)
class FlushResult:
    """What :func:`flush` did: records still waiting, set aside, and why the last send failed."""

    left: int
    rejected: int
    quarantined: int
    gone: bool
    last_error: str


def flush(spool: Spool, client: MlflowClient, timeout_s: float) -> FlushResult:
    """Send what ``spool`` holds within ``timeout_s``, all of it counted: the sender thread is
    not waited for past the deadline (a send still in flight is unacknowledged, so sent again
    by the next flush, and not duplicated). For ``sarl tracking flush``."""
    deadline = time.monotonic() + timeout_s
    drainer = Drainer(spool, client)
    drainer.start()
    try:
        left = drainer.drain(timeout_s)
    finally:
        drainer.stop(max(0.0, deadline - time.monotonic()))
    return FlushResult(
        left, drainer.rejected, drainer.quarantined, drainer.gone, drainer.last_error
    )


__all__ = [
    "GONE",
    "REFUSED",
    "DrainSettings",
    "Drainer",
    "FlushResult",
    "Record",
    "classify",
    "closing_line",
    "flush",
]
