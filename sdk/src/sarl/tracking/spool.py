"""The durable local spool of one MLflow run: every metric, tag and artifact is written here first.

Called by :class:`sarl.tracking.tracker.Tracker` (:meth:`Spool.append` before anything is sent),
its background sender (:mod:`sarl.tracking.drainer`: reads the unsent records in order and
acknowledges what MLflow accepted), the local runner's checkpoint callback (:meth:`Spool.snapshot`:
the unsent tail is part of every checkpoint's files, so a resume on another machine has it),
``sarl tracking flush DIR`` (sends what a run left behind) and ``sarl tracking status DIR``
(:func:`inspect`, read-only: it works while the run holds the spool and changes no file).

A spool directory holds:

* ``spool.json`` — the run (``run_id``, ``tracking_uri``), this spool's id and, where the tracker
  knew them, the run's experiment, name, tags and params (``run``: what ``sarl tracking flush
  --new-run`` recreates the run from when MLflow lost it; see :mod:`sarl.tracking.reattach`);
* ``records.jsonl`` — append-only, one JSON record per line, flushed and fsynced by every
  :meth:`~Spool.append` (one per ``log_metrics`` call, i.e. per step). A record has ``pos`` (its
  position in this file, strictly increasing), ``id`` (``<spool id>:<pos>`` of the spool that
  first wrote it, kept when a checkpoint's tail is adopted, so adopting twice adds nothing) and
  ``kind``: ``metrics`` (``step`` and ``[key, value, timestamp ms]`` triples), ``tags``,
  ``artifact`` (a copy under ``artifacts/<id>/``) or ``status`` (close the run, with the time
  it ended);
* ``acked`` — the last ``pos`` MLflow acknowledged (or set aside), replaced atomically;
* ``rejected.jsonl`` — records MLflow read and refused for their content, each with MLflow's
  message; they were not delivered, and the run's closing line and ``sarl tracking flush`` say so;
* ``quarantine.jsonl`` — damaged lines (:mod:`sarl.tracking.spool_records`: not JSON, an id or
  path that leaves the spool, a step MLflow cannot take, a cut-short append) moved aside with the
  reason, by whoever opens the spool for writing; the records after them are sent as usual.

Nothing in a spool is trusted: every record is validated when read, an artifact is uploaded or
deleted only inside ``artifacts/`` of its own spool (no link leads out), and reading
(:func:`inspect`) never truncates or rewrites a file.

Crash safety: a process killed mid-append leaves at most one torn last line; the next writer
quarantines it (that record's ``log_metrics`` never returned). A kill inside an atomic replace
leaves a ``*.tmp-*`` sibling, removed by the next writer. A crash between MLflow accepting a
batch and ``acked`` being written re-sends it: a metric keeps the timestamp it was spooled with,
and MLflow's SQL store keeps one row per (key, timestamp, step, value) — the primary key of its
``metrics`` table; ``SqlAlchemyStore._log_metrics_once`` skips rows that exist — so a re-sent
point is not added twice. Tags and artifacts are overwritten with the same content.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sarl.durable import fsync_dir as _fsync_dir
from sarl.durable import write_atomic as _write_bytes
from sarl.tracking.spool_records import Damaged, Parsed, Record, parse

FORMAT: Final = "sarl-tracking-spool"
HEADER: Final = "spool.json"
RECORDS: Final = "records.jsonl"
ACKED: Final = "acked"
ARTIFACTS: Final = "artifacts"
REJECTED: Final = "rejected.jsonl"
QUARANTINE: Final = "quarantine.jsonl"
#: Where a checkpoint carries its spool tail (a folder in the checkpoint's files).
IN_CHECKPOINT: Final = "sarl-tracking-spool"
_COMPACT_BYTES: Final = 1 << 20  # rewrite records.jsonl once everything in it is acknowledged
_LEFTOVERS: Final = (HEADER, ACKED, RECORDS)  # files replaced atomically, via <name>.tmp-<hex>


class SpoolError(RuntimeError):
    """A spool directory cannot be used (unreadable, another run's); one line naming it."""


@dataclass(frozen=True)
class SpoolState:
    """What :func:`inspect` read: the counts ``sarl tracking status`` prints."""

    run_id: str
    tracking_uri: str
    waiting: int  # records not acknowledged yet
    damaged: int  # lines a writer will quarantine when it next opens the spool
    rejected: int  # records MLflow refused (``rejected.jsonl``)
    quarantined: int  # lines moved aside (``quarantine.jsonl``)
    in_use: bool  # a process (the run, a flush) holds the spool


class Spool:
    """One run's spool directory, open for writing; thread-safe (training appends while the
    drainer acks)."""

    def __init__(
        self,
        root: Path,
        run_id: str,
        tracking_uri: str,
        *,
        run_info: Mapping[str, Any] | None = None,
    ) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.tracking_uri = tracking_uri
        self._lock = threading.Lock()
        #: Records and lines this process moved to quarantine.jsonl (at open, adopting, sending).
        self.quarantined = 0
        self.root.mkdir(parents=True, exist_ok=True)
        self._flock = _take_lock(self.root)
        header = _read_header(self.root)
        if header is not None and header["run_id"] != run_id:
            raise SpoolError(
                f"tracking spool {self.root} belongs to run {header['run_id']}, not {run_id}"
            )
        _remove_leftovers(self.root)
        self.spool_id = header["spool_id"] if header else uuid.uuid4().hex[:12]
        self._extra = {k: v for k, v in (header or {}).items() if k in ("run", "replaces")}
        if run_info is not None:
            self._extra["run"] = dict(run_info)
        if header != self._header():
            _write_json(self.root / HEADER, self._header())
        self._acked = _read_acked(self.root)
        parsed = _read(self.root)
        if parsed.damaged:
            self._drop_damaged(parsed)
        self._pending = [r for r in parsed.records if r.pos > self._acked]
        self._next = max([self._acked, *(r.pos for r in parsed.records)]) + 1
        self._file = (self.root / RECORDS).open("ab")

    @classmethod
    def open_existing(cls, root: Path) -> Spool:
        """The spool at ``root`` as a run left it (for ``sarl tracking flush``)."""
        header = _read_header(Path(root))
        if header is None:
            raise SpoolError(f"{root} is not a tracking spool (no readable {HEADER})")
        return cls(Path(root), header["run_id"], header["tracking_uri"])

    # -- writing -----------------------------------------------------------------------------

    def append(self, kind: str, body: dict[str, Any], artifact: Path | None = None) -> int:
        """Write one record durably (fsync) and return its position. ``artifact`` (a file or a
        folder) is copied into the spool first, so the record never points at a file that
        changed or went."""
        with self._lock:
            pos = self._next
            record_id = f"{self.spool_id}:{pos}"
            if artifact is not None:
                body = {**body, "path": self._keep(artifact, record_id)}
            self._write(Record(pos, record_id, kind, body))
            return pos

    def adopt(self, other: Path) -> int:
        """Append the unsent records of the spool (or checkpoint tail) at ``other`` that this one
        does not hold yet; returns how many. Their artifacts are copied along; a damaged line,
        or an artifact whose file is missing or leads out of ``other``, is quarantined here."""
        adopted = 0
        other = Path(other)
        parsed = _read(other)
        with self._lock:
            self._quarantine_lines(parsed.damaged, str(other / RECORDS))
            known = {r.id for r in self._pending}
            acked = _read_acked(other)
            for record in parsed.records:
                if record.pos <= acked or record.id in known:
                    continue
                body = dict(record.body)
                if record.kind == "artifact":
                    try:
                        src = contained_artifact(other, record)
                        if not src.exists():
                            raise SpoolError(f"artifact of record {record.id}: {src} is missing")
                    except SpoolError as e:
                        self._note(QUARANTINE, record, str(e), source=str(other / RECORDS))
                        continue
                    body["path"] = self._keep(src, record.id)
                self._write(Record(self._next, record.id, record.kind, body))
                known.add(record.id)
                adopted += 1
        return adopted

    def snapshot(self, dest: Path) -> int:
        """Write the unsent tail (records and their artifacts) as a spool at ``dest``, fsynced;
        returns how many records. Called before a checkpoint is stored."""
        with self._lock:
            pending = list(self._pending)
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        _write_json(dest / HEADER, self._header())
        with (dest / RECORDS).open("wb") as f:
            for record in pending:
                f.write(record.line())
                if record.kind == "artifact":
                    src = self.root / ARTIFACTS / record.folder
                    _copy(src, dest / ARTIFACTS / record.folder)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(dest)
        return len(pending)

    def rebind(self, run_id: str) -> None:
        """Send the records to run ``run_id`` from now on (the old run is gone from MLflow); the
        header keeps the old ids under ``replaces``."""
        with self._lock:
            self._extra["replaces"] = [*self._extra.get("replaces", []), self.run_id]
            self.run_id = run_id
            _write_json(self.root / HEADER, self._header())

    # -- reading and acknowledging (the drainer) -----------------------------------------------

    def pending(self) -> list[Record]:
        """The unsent records, oldest first."""
        with self._lock:
            return list(self._pending)

    @property
    def waiting(self) -> int:
        """How many records are not acknowledged yet."""
        with self._lock:
            return len(self._pending)

    @property
    def run_info(self) -> dict[str, Any] | None:
        """The run's experiment, name, tags and params as the tracker noted them, if it did."""
        info = self._extra.get("run")
        return dict(info) if isinstance(info, dict) else None

    def artifact_path(self, record: Record) -> Path:
        """The spooled copy of an artifact record; :class:`SpoolError` if it leads out of the
        spool. A missing copy was freed after its record was acknowledged (an ``acked`` file lost
        or rewound since): the record reached MLflow before."""
        return contained_artifact(self.root, record)

    def ack(self, pos: int) -> None:
        """Records up to ``pos`` reached MLflow: note it durably, free their artifact copies."""
        with self._lock:
            self._ack(pos)

    def reject(self, record: Record, reason: str) -> None:
        """MLflow read the oldest pending ``record`` and refused it: keep it in
        ``rejected.jsonl`` with ``reason``, and go on with the next."""
        self._set_aside(REJECTED, record, reason)

    def quarantine(self, record: Record, reason: str) -> None:
        """The oldest pending ``record`` cannot be sent as it is (its artifact leads out of the
        spool, say): move it to ``quarantine.jsonl`` with ``reason``."""
        self._set_aside(QUARANTINE, record, reason)

    def close(self) -> None:
        with self._lock:
            self._file.close()
            if self._flock >= 0:
                os.close(self._flock)  # releases the flock
                self._flock = -1

    # -- internals -----------------------------------------------------------------------------

    def _header(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": 1,
            "run_id": self.run_id,
            "tracking_uri": self.tracking_uri,
            "spool_id": self.spool_id,
            **self._extra,
        }

    def _write(self, record: Record) -> None:
        self._file.write(record.line())
        self._file.flush()
        os.fsync(self._file.fileno())
        self._pending.append(record)
        self._next = record.pos + 1

    def _ack(self, pos: int) -> None:
        if self._file.closed:  # a send that outlived close(): the next opener re-sends it
            return
        done = [r for r in self._pending if r.pos <= pos]
        _write_json(self.root / ACKED, pos)
        self._acked = pos
        self._pending = [r for r in self._pending if r.pos > pos]
        for record in done:
            if record.kind == "artifact":
                shutil.rmtree(self.root / ARTIFACTS / record.folder, ignore_errors=True)
        if not self._pending and self._file.tell() > _COMPACT_BYTES:
            # Everything is acknowledged: start the file afresh (acked keeps the numbering).
            self._file.close()
            _write_bytes(self.root / RECORDS, b"")
            self._file = (self.root / RECORDS).open("ab")

    def _note(self, name: str, record: Record, reason: str, *, source: str) -> None:
        self.quarantined += name == QUARANTINE
        doc = {"source": source, "reason": reason, "record": json.loads(record.line())}
        _append_line(self.root / name, (json.dumps(doc) + "\n").encode())

    def _set_aside(self, name: str, record: Record, reason: str) -> None:
        with self._lock:
            if self._file.closed or not self._pending or self._pending[0].id != record.id:
                return  # not the oldest pending record any more: nothing to set aside
            if (
                name == REJECTED
                and record.kind == "artifact"
                and self.artifact_path(record).exists()
            ):  # keep the refused file with the record
                kept = self.root / "rejected-artifacts" / record.folder
                shutil.rmtree(kept, ignore_errors=True)
                _copy(contained_artifact(self.root, record), kept / str(record.body["path"]))
            self._note(name, record, reason, source=str(self.root / RECORDS))
            self._ack(record.pos)

    def _quarantine_lines(self, damaged: list[Damaged], source: str) -> None:
        self.quarantined += len(damaged)
        if damaged:
            _append_line(self.root / QUARANTINE, b"".join(d.entry(source) for d in damaged))

    def _keep(self, src: Path, record_id: str) -> str:
        """Copy ``src`` to ``artifacts/<id>/<name>`` (fsynced); returns ``<name>``."""
        dest = self.root / ARTIFACTS / record_id.replace(":", "-")
        shutil.rmtree(dest, ignore_errors=True)
        _copy(src, dest / src.name)
        return src.name

    def _drop_damaged(self, parsed: Parsed) -> None:
        """Move the damaged lines of the records file to ``quarantine.jsonl`` (first, so a crash
        in between repeats the note rather than losing a line), then rewrite the file with the
        good records only. Only the writer (holding the spool's lock) does this."""
        self._quarantine_lines(parsed.damaged, str(self.root / RECORDS))
        _write_bytes(self.root / RECORDS, b"".join(r.line() for r in parsed.records))


def inspect(root: Path) -> SpoolState:
    """Read the spool at ``root`` without taking it or changing any file: for ``sarl tracking
    status``, also while the run is alive. :class:`SpoolError` if it is not a spool."""
    root = Path(root)
    header = _read_header(root)
    if header is None:
        raise SpoolError(f"{root} is not a tracking spool (no readable {HEADER})")
    in_use = _held(root)
    parsed = _read(root)
    acked = _read_acked(root)
    damaged = len(parsed.damaged)
    if parsed.torn and in_use:
        damaged -= 1  # the live run may be writing that line right now
    return SpoolState(
        run_id=str(header["run_id"]),
        tracking_uri=str(header["tracking_uri"]),
        waiting=sum(1 for r in parsed.records if r.pos > acked),
        damaged=damaged,
        rejected=_count_lines(root / REJECTED),
        quarantined=_count_lines(root / QUARANTINE),
        in_use=in_use,
    )


def contained_artifact(root: Path, record: Record) -> Path:
    """``root/artifacts/<record folder>/<path>``, checked: neither it nor anything under it is a
    link (a spool from elsewhere must not make us upload or delete other files). It may be
    missing (see :meth:`Spool.artifact_path`)."""
    base = Path(root) / ARTIFACTS / record.folder
    path = base / str(record.body["path"])
    for step in (Path(root) / ARTIFACTS, base, path):
        if step.is_symlink():
            raise SpoolError(f"artifact of record {record.id}: {step} is a link; not sent")
    if path.is_dir():
        for folder, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                if (Path(folder) / name).is_symlink():
                    raise SpoolError(
                        f"artifact of record {record.id}: {Path(folder) / name} is a link; not sent"
                    )
    return path


def _take_lock(root: Path) -> int:
    """Hold ``root/.lock`` (``flock``) while the spool is open: one writer and one sender per
    spool (a run and ``sarl tracking flush`` never interleave). The kernel drops it when the
    process dies; where the filesystem has no ``flock`` the spool is used unlocked."""
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        os.close(fd)
        raise SpoolError(f"tracking spool {root} is in use by another process") from e
    except OSError:
        pass  # no flock here
    return fd


def _held(root: Path) -> bool:
    """Whether a writer holds ``root``'s lock (tested with a shared lock, released at once)."""
    try:
        fd = os.open(root / ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the shared lock too
    return False


def _remove_leftovers(root: Path) -> None:
    """Temp siblings of atomically replaced files (``acked.tmp-<hex>``, ...) that a process
    killed inside the replace left; only the lock holder calls this, so none is in use."""
    for name in _LEFTOVERS:
        for leftover in root.glob(f"{name}.tmp-*"):
            leftover.unlink(missing_ok=True)


def _copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, dirs_exist_ok=True)
        files = [p for p in dest.rglob("*") if p.is_file()]
    else:
        shutil.copyfile(src, dest)
        files = [dest]
    for path in files:
        with path.open("rb") as f:
            os.fsync(f.fileno())
    _fsync_dir(dest.parent)


def _read(root: Path) -> Parsed:
    """The records of ``root/records.jsonl`` and its damaged lines; the file is not changed."""
    try:
        data = (root / RECORDS).read_bytes()
    except FileNotFoundError:
        data = b""
    return parse(data)


def _append_line(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _read_header(root: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((root / HEADER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    if not isinstance(doc.get("run_id"), str) or not isinstance(doc.get("tracking_uri"), str):
        return None
    return doc


def _read_acked(root: Path) -> int:
    try:
        return int((root / ACKED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0


def _write_json(path: Path, value: Any) -> None:
    _write_bytes(path, json.dumps(value).encode())
