"""The verl job's metrics through sarl's durable spool, not through verl's own MLflow logger.

Called by :mod:`sarl_jobs.verl_trainer` on the driver (node 0): :func:`open_tracking` before verl
starts, then ``with tracking: run_verl(...)``; and by
:class:`sarl_jobs.checkpoints.StoreCheckpointCallback` in verl's TaskRunner:
:func:`check_driver_node` when it is built, :func:`carry_tracking` before each upload.

Why: verl 0.9.1's MLflow logger (``_MlflowLoggingAdapter.log`` in ``verl/utils/tracking.py``)
tries each step's metrics 3 times without a pause and then drops them, and a start that finds
MLflow away trains untracked; an outage of any length must neither stop training nor lose a
metric (issue 27). So verl logs with ``trainer.logger=[console,file]``
(:func:`sarl.integrations.verl.config.verl_overrides`, ``metrics_file``): its ``FileLogger``
(``verl/utils/tracking.py`` of verl 0.9.1, lines 529-548) opens ``$VERL_FILE_LOGGER_PATH`` with
``"wb"`` — truncated — when the trainer's ``fit`` starts, and writes one line per
``Tracking.log`` call, ``{"step": N, "data": {...}}`` (orjson with numpy support: NaN and
infinities become ``null``), unbuffered, so a line is in the file when ``log`` returns.

* :class:`MetricsTailer`, a thread in the driver, follows that file (:func:`metrics_file`, on the
  driver's scratch) as verl appends it: whole lines only (a partial last line waits for its end),
  and from the start again when the file is re-created (another inode; the old file's last lines are
  read first) or truncated (shorter than what was read: a truncation that grew past that point again
  between two reads is not seen, and the job never truncates in place — the driver removes the file
  before verl starts, so verl's ``"wb"`` makes a new one). Each record's numbers go at the record's
  step, under the names verl's MLflow logger gave them (:func:`mlflow_key`), into the run's
  :class:`~sarl.tracking.tracker.Tracker`, which spools them durably and sends them in order,
  exactly once, whenever MLflow answers.
* Unsent records ride in every checkpoint. verl's checkpoint callback runs in another process (the
  TaskRunner, a Ray actor) and cannot reach the driver's Tracker, and copying the spool's files
  would race with its appends, acknowledgements and compaction. So the callback asks the driver
  through files in ``snapshots/`` beside the metrics file (``<id>.json``, answered by
  ``<id>.done``); the tailer first reads the metrics file to its end — every line verl wrote before
  the save — and then writes the spool's unsent records (:meth:`Tracker.snapshot`) to
  ``snapshots/<id>.spool``, which the callback moves into ``global_step_N/sarl-tracking-spool/``
  before the upload. The snapshot is written aside, not into the checkpoint, so a late answer (the
  callback gave up after :data:`SNAPSHOT_WAIT_S`) cannot change files being uploaded. A resumed job
  adopts the restored checkpoint's tail (``Tracker.resume(..., carried=[...])``).
* Step N of checkpoint N: verl 0.9.1 saves the checkpoint of step N *before* it logs step N's
  metrics (``verl/trainer/ppo/v1/trainer_base.py``, ``fit``: "2. save checkpoint" runs
  ``_save_checkpoint`` and with it the callback, line 485; "5. record metrics", the
  ``self.logger.log`` of line 514, follows). The snapshot takes what is spooled when it is asked and
  never waits for step N — verl logs it only after the upload returns, so waiting would deadlock —
  hence checkpoint N carries the unsent records of the steps before N, not step N's. Those stay in
  the driver's spool and, if still unsent then, ride in the next checkpoint. A job resumed from
  checkpoint N trains from step N + 1, so the one thing a resume on another machine can miss is step
  N's metrics, and only when MLflow did not take them between that step and the loss of the driver's
  scratch; a container restarted in place keeps its scratch, reopens the run's spool and reads the
  metrics file its predecessor's verl left (:func:`open_tracking`), so it loses nothing.
* Placement: the TaskRunner writes the metrics file on its node and the driver reads it on node 0.
  verl creates the TaskRunner from the driver (``run_ppo`` in ``verl/trainer/main_ppo.py``,
  ``task_runner_class.remote()``) with Ray's default scheduling, whose hybrid policy takes the
  caller's node while its utilisation is under the spread threshold, and the cluster is idle then. A
  TaskRunner elsewhere would write metrics that nobody reads, so the checkpoint callback refuses to
  start where the driver's ``snapshots/`` folder is missing (:func:`check_driver_node`).

Imports neither verl nor MLflow at import time (the checkpoint callback imports this module).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final, Protocol

from sarl.durable import fsync_dir, write_atomic
from sarl.tracking.spool import IN_CHECKPOINT

if TYPE_CHECKING:
    from sarl.spec.experiment import Experiment
    from sarl.tracking.tracker import Tracker

logger = logging.getLogger(__name__)

#: verl's metrics file, in the driver's tracking folder (``<workdir>/tracking``).
METRICS_FILE: Final = "metrics.jsonl"
#: Snapshot requests and answers, beside the metrics file.
SNAPSHOTS: Final = "snapshots"
#: How long the checkpoint callback waits for the driver's snapshot before uploading without it.
SNAPSHOT_WAIT_S: Final = 300.0
#: How often the tailer looks for new lines and snapshot requests.
POLL_S: Final = 0.5
# verl 0.9.1's MLflow key rules (_MlflowLoggingAdapter._sanitize_key, verl/utils/tracking.py).
_SLASHES: Final = re.compile(r"/+")
_INVALID: Final = re.compile(r"[^/\w.\- :]")
_MAX_KEY: Final = 250  # MLflow's limit on a metric name


def tracking_uri(exp: Experiment, environ: Mapping[str, str]) -> str | None:
    """``MLFLOW_TRACKING_URI``, else ``tracking.mlflow_uri``; ``None``: the job tracks nothing."""
    return environ.get("MLFLOW_TRACKING_URI") or exp.spec.tracking.mlflow_uri or None


def tracking_dir(root: Path) -> Path:
    """The driver's tracking folder in the job's workdir: metrics file, snapshots, spool."""
    return Path(root) / "tracking"


def metrics_file(root: Path) -> Path:
    """Where verl's file logger writes (``VERL_FILE_LOGGER_PATH``) and the tailer reads."""
    return tracking_dir(root) / METRICS_FILE


def snapshot_dir(metrics: Path) -> Path:
    return Path(metrics).parent / SNAPSHOTS


def mlflow_key(key: str) -> str:
    """``key`` as verl's MLflow logger sends it: ``@`` -> ``_at_``, runs of ``/`` -> one, any
    other character MLflow refuses -> ``_`` (so the curves keep the names they had)."""
    return _INVALID.sub("_", _SLASHES.sub("/", key.replace("@", "_at_")))


def numeric_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of one verl log record, keyed by :func:`mlflow_key`; lists, strings,
    booleans and ``null`` (NaN or an infinity in verl) are left out, as are names longer than
    MLflow takes (with a warning)."""
    out: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        try:
            number = float(value)
        except OverflowError:  # an int beyond a float's range
            continue
        if not math.isfinite(number):
            continue
        name = mlflow_key(str(key))
        if not name or len(name) > _MAX_KEY:
            logger.warning("tracking: metric %r has no valid MLflow name; not logged", key)
            continue
        out[name] = number
    return out


class MetricsSink(Protocol):
    """What the tailer feeds: a :class:`~sarl.tracking.tracker.Tracker`."""

    def log_metrics(self, metrics: Mapping[str, float | None], step: int) -> None: ...

    def snapshot(self, dest: Path) -> int: ...


class MetricsTailer:
    """Follows verl's metrics file into ``sink`` (see the module docstring); answers snapshot
    requests in ``requests`` (a folder, ``None``: none). :meth:`poll` reads what is new;
    :meth:`start` does it every ``poll_s`` in a thread until :meth:`stop`, which reads the rest."""

    def __init__(
        self,
        path: Path,
        sink: MetricsSink,
        *,
        requests: Path | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.path = Path(path)
        self.sink = sink
        self.requests = requests
        self.poll_s = poll_s
        self.records = 0  # records logged into the sink
        self.snapshots = 0  # snapshot requests answered
        self._file: IO[bytes] | None = None
        self._ident: tuple[int, int] | None = None  # (device, inode) of the open file
        self._pos = 0  # bytes read from it
        self._buffer = b""  # read, not handled yet: whole lines, then a partial one
        self._stop = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    # -- the thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sarl-verl-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after a last read to the end of the file (and a last look for
        snapshot requests); never raises (the reason is logged). A second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        else:
            self._round()
        if self._buffer:
            logger.warning(
                "tracking: %s ends in a partial line (%d bytes), not logged",
                self.path,
                len(self._buffer),
            )
        self._close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._round()
            self._stop.wait(self.poll_s)
        self._round()  # what verl wrote last

    def _round(self) -> None:
        try:
            pending = self._pending_requests()  # listed first: their lines are in the file
            self.poll()
            for request in pending:
                self._answer(request)
        except Exception:  # an unexpected error must not end the tailer: the next round retries
            logger.exception("tracking: following %s failed; trying again", self.path)

    # -- the metrics file ----------------------------------------------------------------------

    def poll(self) -> int:
        """Log every whole line verl added since the last call; returns how many lines."""
        count = 0
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:  # not written yet, or removed: what was added before counts
            return self._read() if self._file is not None else 0
        if self._file is None or (stat.st_dev, stat.st_ino) != self._ident:
            if self._file is not None:
                count += self._read()  # the replaced file's last lines
            self._reopen("re-created" if self._file is not None else None)
        elif stat.st_size < self._pos:
            count += self._handle_lines()
            self._reopen("truncated")
        return count + (self._read() if self._file is not None else 0)

    def _read(self) -> int:
        """Handle the whole lines added to the open file since the last read."""
        if self._file is None:
            return 0
        self._file.seek(self._pos)
        data = self._file.read()
        self._pos += len(data)
        self._buffer += data
        return self._handle_lines()

    def _reopen(self, why: str | None) -> None:
        if why is not None:
            logger.info("tracking: %s was %s; following it from its start", self.path, why)
            if self._buffer:
                logger.warning(
                    "tracking: the old %s ended in a partial line (%d bytes), not logged",
                    self.path,
                    len(self._buffer),
                )
        self._close()
        try:
            self._file = self.path.open("rb")
        except FileNotFoundError:
            return
        stat = os.fstat(self._file.fileno())
        self._ident = (stat.st_dev, stat.st_ino)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._ident, self._pos, self._buffer = None, None, 0, b""

    def _handle_lines(self) -> int:
        count = 0
        while (end := self._buffer.find(b"\n")) >= 0:
            self._handle(self._buffer[:end])  # raises (spool not writable): the line stays
            self._buffer = self._buffer[end + 1 :]
            count += 1
        return count

    def _handle(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            doc = json.loads(line)
            step, data = int(doc["step"]), doc["data"]
            if not isinstance(data, dict):
                raise TypeError(f"data is a {type(data).__name__}")
        except (ValueError, KeyError, TypeError) as e:
            logger.warning(
                "tracking: a line of %s is no verl log record (%s); skipped", self.path, e
            )
            return
        metrics = numeric_metrics(data)
        if not metrics:
            return
        try:
            self.sink.log_metrics(metrics, step=step)
        except (ValueError, TypeError) as e:  # refused before spooling: retrying cannot help
            logger.warning("tracking: step %d of %s not logged: %s", step, self.path, e)
            return
        self.records += 1

    # -- snapshot requests ---------------------------------------------------------------------

    def _pending_requests(self) -> list[Path]:
        if self.requests is None or not self.requests.is_dir():
            return []
        return sorted(self.requests.glob("*.json"))

    def _answer(self, request: Path) -> None:
        if not request.exists():  # the callback gave up waiting
            return
        spool = request.with_suffix(".spool")
        try:
            reply: dict[str, Any] = {"records": self.sink.snapshot(spool)}
            self.snapshots += 1
        except Exception as e:
            logger.warning("tracking: snapshot %s failed: %s", spool, e)
            reply = {"error": " ".join(str(e).split())[:300]}
        write_atomic(request.with_suffix(".done"), json.dumps(reply).encode())
        request.unlink(missing_ok=True)


# -- the checkpoint callback's side (verl's TaskRunner) --------------------------------------------


def check_driver_node(metrics: Path) -> None:
    """Raise RuntimeError when this process does not run beside the driver that follows
    ``metrics`` (its ``snapshots/`` folder is missing here): verl's metrics would not be
    tracked (see the module docstring, Placement)."""
    if not snapshot_dir(metrics).is_dir():
        raise RuntimeError(
            f"tracking: {snapshot_dir(metrics)} does not exist on {socket.gethostname()}: verl's "
            f"TaskRunner is not on the node of the job's driver, which follows {metrics}; its "
            "metrics would not be tracked"
        )


def request_snapshot(
    metrics: Path, *, step: int, wait_s: float = SNAPSHOT_WAIT_S, poll_s: float = 0.05
) -> tuple[Path, int] | None:
    """Ask the driver following ``metrics`` for the spool's unsent records (after every line
    written so far); returns the snapshot's folder (a spool, for the caller to move) and how
    many records it holds, or ``None`` when the driver did not answer within ``wait_s`` or could
    not write it."""
    folder = snapshot_dir(metrics)
    request = folder / f"step-{step}-{uuid.uuid4().hex[:8]}.json"
    answer = request.with_suffix(".done")
    write_atomic(request, json.dumps({"step": step}).encode())
    deadline = time.monotonic() + wait_s
    while not answer.exists():
        if time.monotonic() > deadline:
            request.unlink(missing_ok=True)
            logger.warning(
                "tracking: the driver did not answer a snapshot request within %.0f s; "
                "checkpoint %d carries no tracking records (they stay in the driver's spool)",
                wait_s,
                step,
            )
            return None
        time.sleep(poll_s)
    reply = json.loads(answer.read_text(encoding="utf-8"))
    answer.unlink(missing_ok=True)
    if "error" in reply:
        logger.warning(
            "tracking: checkpoint %d carries no tracking records: %s", step, reply["error"]
        )
        return None
    return request.with_suffix(".spool"), int(reply["records"])


def carry_tracking(metrics: Path, step: int, checkpoint_dir: Path) -> int | None:
    """Put the driver's unsent tracking records into ``checkpoint_dir/sarl-tracking-spool``
    before checkpoint ``step`` is uploaded; returns how many (``None``: none carried, see
    :func:`request_snapshot`)."""
    answer = request_snapshot(metrics, step=step)
    if answer is None:
        return None
    snapshot, records = answer
    dest = Path(checkpoint_dir) / IN_CHECKPOINT
    shutil.rmtree(dest, ignore_errors=True)
    shutil.move(snapshot, dest)
    fsync_dir(dest.parent)
    logger.info("checkpoint step %d carries %d unsent tracking records", step, records)
    return records


# -- the driver's side -----------------------------------------------------------------------------


class DriverTracking:
    """The driver's tracking: the run's Tracker and the tailer feeding it. As a context manager
    around verl's run it follows the metrics file, then reads the rest and finishes the run
    (``FINISHED``, or ``FAILED``/``KILLED`` after an error, as the Tracker's own ``with``) and
    prints how many records are still spooled."""

    def __init__(self, tracker: Tracker, metrics: Path, *, poll_s: float = POLL_S) -> None:
        self.tracker = tracker
        self.metrics_file = Path(metrics)
        self.tailer = MetricsTailer(
            self.metrics_file, tracker, requests=snapshot_dir(metrics), poll_s=poll_s
        )

    def __enter__(self) -> DriverTracking:
        self.tailer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.tailer.stop()
        finally:
            self.tracker.__exit__(exc_type, exc, tb)
            print(self.tracker.closing_line(), flush=True)


def open_tracking(
    exp: Experiment,
    root: Path,
    environ: Mapping[str, str],
    *,
    resumed_from: Path | None = None,
    poll_s: float = POLL_S,
) -> DriverTracking | None:
    """The driver's tracking before verl starts, ``None`` without a tracking URI
    (:func:`tracking_uri`).

    The run is ``MLFLOW_RUN_ID`` (resumed: it adopts the unsent records that ``resumed_from``, the
    restored ``global_step_N`` folder, carries, and drops metric points of steps it already
    holds, ``Tracker.skip_logged_steps``), else a new run of the Experiment. Its spool is
    ``<root>/tracking/spool/<run id>``. A metrics file left by a previous container is read into
    a resumed run first (removed unread for a new run: another run's), then removed, and
    ``snapshots/`` is made afresh.
    """
    uri = tracking_uri(exp, environ)
    if uri is None:
        return None
    from sarl.tracking.tracker import Tracker

    folder = tracking_dir(root)
    path = folder / METRICS_FILE
    run_id = environ.get("MLFLOW_RUN_ID")
    if run_id:
        carried = [Path(resumed_from) / IN_CHECKPOINT] if resumed_from is not None else []
        tracker = Tracker.resume(uri, run_id, spool_root=folder / "spool", carried=carried)
        try:
            tracker.skip_logged_steps()  # steps trained again keep their first values
            MetricsTailer(path, tracker).stop()  # reads a previous container's file, if any
        except BaseException:
            tracker.abandon()
            raise
    else:
        tracker = Tracker.start_experiment(uri, exp, backend="verl", spool_root=folder / "spool")
    path.unlink(missing_ok=True)  # verl's FileLogger creates it anew
    shutil.rmtree(snapshot_dir(path), ignore_errors=True)
    snapshot_dir(path).mkdir(parents=True)
    return DriverTracking(tracker, path, poll_s=poll_s)
