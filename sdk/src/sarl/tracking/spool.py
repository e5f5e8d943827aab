"""The durable local spool of one MLflow run: every metric, tag and artifact is written here first.

Called by :class:`sarl.tracking.tracker.Tracker` (:meth:`Spool.append` before anything is sent),
its background sender (:mod:`sarl.tracking.drainer`: reads the unsent records in order and
acknowledges what MLflow accepted), the local runner's checkpoint callback (:meth:`Spool.snapshot`:
the unsent tail is part of every checkpoint's files, so a resume on another machine has it) and
``sarl tracking flush DIR`` (sends what a run left behind).

A spool directory holds:

* ``spool.json`` — the run (``run_id``, ``tracking_uri``) and this spool's id;
* ``records.jsonl`` — append-only, one JSON record per line, flushed and fsynced by every
  :meth:`~Spool.append` (one per ``log_metrics`` call, i.e. per step). A record has ``pos`` (its
  position in this file, strictly increasing), ``id`` (``<spool id>:<pos>`` of the spool that
  first wrote it, kept when a checkpoint's tail is adopted, so adopting twice adds nothing) and
  ``kind``: ``metrics`` (``step`` and ``[key, value, timestamp ms]`` triples), ``tags``,
  ``artifact`` (a copy under ``artifacts/<id>/``) or ``status`` (close the run);
* ``acked`` — the last ``pos`` MLflow acknowledged, replaced atomically (fsync, rename, dir fsync).

Crash safety: a process killed mid-append leaves at most one torn last line, cut off on the next
open (that record's ``log_metrics`` never returned). A crash between MLflow accepting a batch and
``acked`` being written re-sends it: a metric keeps the timestamp it was spooled with, and MLflow's
SQL store keeps one row per (key, timestamp, step, value) — the primary key of its ``metrics``
table; ``SqlAlchemyStore._log_metrics_once`` skips rows that exist — so a re-sent point is not
added twice. Tags and artifacts are overwritten with the same content.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sarl.durable import fsync_dir as _fsync_dir
from sarl.durable import write_atomic as _write_bytes

FORMAT: Final = "sarl-tracking-spool"
HEADER: Final = "spool.json"
RECORDS: Final = "records.jsonl"
ACKED: Final = "acked"
ARTIFACTS: Final = "artifacts"
#: Where a checkpoint carries its spool tail (a folder in the checkpoint's files).
IN_CHECKPOINT: Final = "sarl-tracking-spool"
_COMPACT_BYTES: Final = 1 << 20  # rewrite records.jsonl once everything in it is acknowledged


class SpoolError(RuntimeError):
    """A spool directory cannot be used (unreadable, another run's); one line naming it."""


@dataclass(frozen=True)
class Record:
    pos: int
    id: str
    kind: str
    body: dict[str, Any]

    def line(self) -> bytes:
        doc = {"pos": self.pos, "id": self.id, "kind": self.kind, **self.body}
        return (json.dumps(doc, separators=(",", ":")) + "\n").encode()


class Spool:
    """One run's spool directory; thread-safe (training appends while the drainer acks)."""

    def __init__(self, root: Path, run_id: str, tracking_uri: str) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.tracking_uri = tracking_uri
        self._lock = threading.Lock()
        self.root.mkdir(parents=True, exist_ok=True)
        self._flock = _take_lock(self.root)
        header = _read_header(self.root)
        if header is not None and header["run_id"] != run_id:
            raise SpoolError(
                f"tracking spool {self.root} belongs to run {header['run_id']}, not {run_id}"
            )
        self.spool_id = header["spool_id"] if header else uuid.uuid4().hex[:12]
        if header is None or header["tracking_uri"] != tracking_uri:
            _write_json(self.root / HEADER, self._header())
        self._acked = _read_acked(self.root)
        self._pending: list[Record] = [r for r in _load(self.root) if r.pos > self._acked]
        self._next = max([self._acked, *(r.pos for r in self._pending)]) + 1
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
        does not hold yet; returns how many. Their artifacts are copied along."""
        adopted = 0
        with self._lock:
            known = {r.id for r in self._pending}
            acked = _read_acked(other)
            for record in _load(other):
                if record.pos <= acked or record.id in known:
                    continue
                body = dict(record.body)
                if record.kind == "artifact":
                    src = other / ARTIFACTS / _safe(record.id) / str(body["path"])
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
                    src = self.root / ARTIFACTS / _safe(record.id)
                    _copy(src, dest / ARTIFACTS / _safe(record.id))
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(dest)
        return len(pending)

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

    def artifact_path(self, record: Record) -> Path:
        return self.root / ARTIFACTS / _safe(record.id) / str(record.body["path"])

    def ack(self, pos: int) -> None:
        """Records up to ``pos`` reached MLflow: note it durably, free their artifact copies."""
        with self._lock:
            if self._file.closed:  # a send that outlived close(): the next opener re-sends it
                return
            done = [r for r in self._pending if r.pos <= pos]
            _write_json(self.root / ACKED, pos)
            self._acked = pos
            self._pending = [r for r in self._pending if r.pos > pos]
            for record in done:
                if record.kind == "artifact":
                    shutil.rmtree(self.root / ARTIFACTS / _safe(record.id), ignore_errors=True)
            if not self._pending and self._file.tell() > _COMPACT_BYTES:
                # Everything is acknowledged: start the file afresh (acked keeps the numbering).
                self._file.close()
                _write_bytes(self.root / RECORDS, b"")
                self._file = (self.root / RECORDS).open("ab")

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
        }

    def _write(self, record: Record) -> None:
        self._file.write(record.line())
        self._file.flush()
        os.fsync(self._file.fileno())
        self._pending.append(record)
        self._next = record.pos + 1

    def _keep(self, src: Path, record_id: str) -> str:
        """Copy ``src`` to ``artifacts/<id>/<name>`` (fsynced); returns ``<name>``."""
        dest = self.root / ARTIFACTS / _safe(record_id)
        shutil.rmtree(dest, ignore_errors=True)
        _copy(src, dest / src.name)
        return src.name


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


def _safe(record_id: str) -> str:
    return record_id.replace(":", "-")


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


def _load(root: Path) -> list[Record]:
    """The records of ``root/records.jsonl``; a torn last line (a killed append) is cut off."""
    path = root / RECORDS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records, good = [], 0
    for line in data.splitlines(keepends=True):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("torn line")
            doc = json.loads(line)
            pos, rid, kind = int(doc.pop("pos")), str(doc.pop("id")), str(doc.pop("kind"))
        except (ValueError, KeyError, TypeError):
            break  # only the last append can be torn; nothing after it was acknowledged
        records.append(Record(pos, rid, kind, doc))
        good += len(line)
    if good < len(data):
        with path.open("r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return records


def _read_header(root: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((root / HEADER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    return doc


def _read_acked(root: Path) -> int:
    try:
        return int((root / ACKED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0


def _write_json(path: Path, value: Any) -> None:
    _write_bytes(path, json.dumps(value).encode())
