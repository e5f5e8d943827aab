"""Reading a tracking spool's ``records.jsonl`` without trusting it: parse, validate, set aside.

Called by :mod:`sarl.tracking.spool` whenever it reads records (opening a run's spool, adopting a
checkpoint's tail, ``sarl tracking status``). A spool file may come from a checkpoint another
machine wrote, a disk that lost a byte or a hand edit, so every line is checked before anything
acts on it: a record's ``id`` names a folder under ``artifacts/`` that the spool deletes, its
``path`` a file that ``sarl tracking flush`` uploads, its ``step`` a number MLflow's client must
serialise as an int64. A line that fails a check is *damaged*: it is returned with its reason, for
the spool to quarantine, and the lines after it are read as usual (one bad byte never costs the
records behind it).

Limits, and where they come from:

* ``id``: ``<spool id>:<pos>``, the spool id a hex string (``uuid4().hex[:12]`` in
  :class:`~sarl.tracking.spool.Spool`), so its folder name ``<spool id>-<pos>`` has no ``/`` or
  ``..``.
* ``step`` and timestamps: int64, as MLflow's ``Metric`` proto declares them (``int64 step``,
  ``int64 timestamp`` in ``mlflow/protos/service.proto``, 3.17.2); a larger step made the
  client's serialisation raise on every try. Timestamps are milliseconds >= 0
  (``_validate_metric`` in ``mlflow/utils/validation.py``).
* metric values: numbers (``bool`` excluded, as ``_is_numeric`` there does); NaN and infinities
  pass, MLflow stores them.
* artifact ``path``: one file or folder name; ``dir``: a relative path without ``..``.
* a line: at most :data:`MAX_LINE_BYTES`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

KINDS: Final = frozenset({"metrics", "tags", "artifact", "status"})
STATUSES: Final = frozenset({"FINISHED", "FAILED", "KILLED"})
INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)
#: A step's metrics are a few hundred bytes; a record this long was not written by a Tracker.
MAX_LINE_BYTES: Final = 4 << 20
#: Points in one record: ``Tracker.log_metrics`` writes one per metric of a step.
MAX_POINTS: Final = 100_000
_ID: Final = re.compile(r"[0-9a-f]{1,32}:[0-9]{1,19}")


class DamagedRecord(ValueError):
    """A spool line that cannot be trusted; the message says why, in a few words."""


@dataclass(frozen=True)
class Record:
    pos: int
    id: str
    kind: str
    body: dict[str, Any]

    def line(self) -> bytes:
        doc = {"pos": self.pos, "id": self.id, "kind": self.kind, **self.body}
        return (json.dumps(doc, separators=(",", ":")) + "\n").encode()

    @property
    def folder(self) -> str:
        """The name of this record's folder under ``artifacts/`` (safe: the id is checked)."""
        return self.id.replace(":", "-")


@dataclass(frozen=True)
class Damaged:
    """A line set aside: where it was (byte offset), why, and its bytes."""

    offset: int
    reason: str
    raw: bytes

    def entry(self, source: str) -> bytes:
        """One line of ``quarantine.jsonl``: the reason and the original line, readable."""
        doc = {
            "source": source,
            "offset": self.offset,
            "reason": self.reason,
            "line": self.raw.decode("utf-8", errors="backslashreplace"),
        }
        return (json.dumps(doc) + "\n").encode()


@dataclass(frozen=True)
class Parsed:
    records: list[Record]
    damaged: list[Damaged]
    torn: bool  # the file ends in a line without its newline (an append cut short)


def parse(data: bytes) -> Parsed:
    """Every record of a ``records.jsonl`` held in ``data``, oldest first, and the damaged lines.

    Positions must increase and ids must not repeat; a line breaking that order is damaged. The
    last line without a newline is an append cut short, damaged too (``torn``).
    """
    records: list[Record] = []
    damaged: list[Damaged] = []
    seen: set[str] = set()
    offset = 0
    torn = False
    for raw in data.splitlines(keepends=True):
        try:
            if not raw.endswith(b"\n"):
                torn = True
                raise DamagedRecord("the line is cut short (a write was interrupted)")
            record = check_line(raw)
            if records and record.pos <= records[-1].pos:
                raise DamagedRecord(f"position {record.pos} is not after {records[-1].pos}")
            if record.id in seen:
                raise DamagedRecord(f"id {record.id} repeats an earlier record")
        except DamagedRecord as e:
            damaged.append(Damaged(offset, str(e), raw))
        else:
            records.append(record)
            seen.add(record.id)
        offset += len(raw)
    return Parsed(records, damaged, torn)


def check_line(raw: bytes) -> Record:
    """One line as a :class:`Record`; :class:`DamagedRecord` saying what is wrong."""
    if len(raw) > MAX_LINE_BYTES:
        raise DamagedRecord(f"the line has {len(raw)} bytes, more than {MAX_LINE_BYTES}")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise DamagedRecord(f"not JSON ({e.__class__.__name__}: {str(e)[:80]})") from e
    if not isinstance(doc, dict):
        raise DamagedRecord("not a JSON object")
    pos, record_id, kind = doc.pop("pos", None), doc.pop("id", None), doc.pop("kind", None)
    if not _is_int(pos) or not 0 < pos <= INT64_MAX:
        raise DamagedRecord(f"pos {pos!r} is not a positive integer")
    if not isinstance(record_id, str) or not _ID.fullmatch(record_id):
        raise DamagedRecord(f"id {str(record_id)[:80]!r} is not <spool id>:<position>")
    if kind not in KINDS:
        raise DamagedRecord(f"kind {str(kind)[:40]!r} is not one of {', '.join(sorted(KINDS))}")
    _CHECKS[kind](doc)
    return Record(pos, record_id, kind, doc)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_metrics(body: dict[str, Any]) -> None:
    step, points = body.get("step"), body.get("metrics")
    if not _is_int(step) or not INT64_MIN <= step <= INT64_MAX:
        raise DamagedRecord(f"step {str(step)[:40]} is not an int64 (MLflow's step type)")
    if not isinstance(points, list) or not 0 < len(points) <= MAX_POINTS:
        raise DamagedRecord(f"metrics is not a list of 1 to {MAX_POINTS} points")
    for point in points:
        if not isinstance(point, list) or len(point) != 3:
            raise DamagedRecord("a metric point is not [name, value, timestamp]")
        key, value, ts = point
        if not isinstance(key, str) or not key:
            raise DamagedRecord("a metric name is not a non-empty string")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DamagedRecord(f"metric {key[:80]!r}: value {str(value)[:40]} is not a number")
        if not _is_int(ts) or not 0 <= ts <= INT64_MAX:
            raise DamagedRecord(f"metric {key[:80]!r}: timestamp {str(ts)[:40]} is not an int64")


def _check_tags(body: dict[str, Any]) -> None:
    tags = body.get("tags")
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise DamagedRecord("tags is not a mapping of strings to strings")


def _check_artifact(body: dict[str, Any]) -> None:
    name, folder = body.get("path"), body.get("dir")
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
        raise DamagedRecord(f"artifact path {str(name)[:80]!r} is not a file name")
    if folder is None:
        return
    if (
        not isinstance(folder, str)
        or folder.startswith("/")
        or "\\" in folder
        or any(part in ("", ".", "..") for part in folder.split("/"))
    ):
        raise DamagedRecord(f"artifact dir {str(folder)[:80]!r} is not a relative path")


def _check_status(body: dict[str, Any]) -> None:
    status, end = body.get("status"), body.get("end_time")
    if status not in STATUSES:
        raise DamagedRecord(f"status {str(status)[:40]!r} is not FINISHED, FAILED or KILLED")
    if end is not None and (not _is_int(end) or not 0 <= end <= INT64_MAX):
        raise DamagedRecord(f"end_time {str(end)[:40]} is not an int64")


_CHECKS = {
    "metrics": _check_metrics,
    "tags": _check_tags,
    "artifact": _check_artifact,
    "status": _check_status,
}

__all__ = ["Damaged", "DamagedRecord", "Parsed", "Record", "check_line", "parse"]
