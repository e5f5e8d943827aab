"""One owner per run: a lease object in the checkpoint store, ``<root>/lease.json``.

Called by :class:`sarl.runner.session.LocalSession` (through :mod:`sarl.runner.ownership`) when a
local run starts, renewed by a background thread while it trains, checked before each checkpoint
is saved and released when the session ends. The run directory's ``flock`` only keeps two runs of
one workdir apart; the store (a shared directory or an S3 prefix) is what two machines resuming
the same run share, so the lease lives there.

Protocol. The lease names its holder (host, pid, process start time, a random id) and when it was
last renewed (the holder's clock, UTC). Every change is conditional on what the writer last read:

* S3: create with ``If-None-Match: *`` and renew/take over with ``If-Match: <etag>`` (S3's
  conditional writes, also MinIO's and moto's: ``moto/s3/responses.py`` ``put_object`` in moto
  5.x raises ``PreconditionFailed``). A server that ignores the headers is caught by reading the
  lease back after each write: another holder there means the write lost.
* A local or mounted directory: the same read-compare-write under an exclusive ``flock`` of the
  store's directory (released by the kernel when the holder dies), the file replaced atomically.

A lease renewed within ``STALE_PERIODS`` renewal periods is live: a second owner is refused
(:class:`LeaseHeld`, naming the holder and when it last renewed). A stale one is taken over only
when asked (``take_over``), and logged. A lease whose holder is a dead process of this host is
taken over without asking: nobody else can hold it (a SIGKILLed run resumed on its machine).
Clock skew between machines shifts when a lease looks stale by the skew; keep clocks in sync
(NTP) or raise ``period_s``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sarl.durable import write_atomic
from sarl.storage.base import CheckpointStore, StorageError

logger = logging.getLogger(__name__)

LEASE_NAME = "lease.json"
#: Seconds between renewals of a live run's lease.
PERIOD_S = 30.0
#: A lease not renewed for this many periods is stale (its holder is gone or cut off).
STALE_PERIODS = 4
_PROCESS_START = datetime.now(UTC).isoformat(timespec="seconds")


class LeaseHeld(StorageError):
    """Another live process owns the run (or a stale owner was not taken over explicitly)."""


class LeaseLost(StorageError):
    """This process no longer owns the run: another one took the lease over."""


@dataclass(frozen=True)
class Holder:
    """Who owns a run: ``id`` is unique per process; the rest is for people and liveness."""

    id: str
    host: str
    pid: int
    started_at: str

    @classmethod
    def this_process(cls) -> Holder:
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), _PROCESS_START)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} (started {self.started_at})"


@dataclass(frozen=True)
class LeaseDoc:
    """The lease object's content."""

    holder: Holder
    renewed_at: str
    period_s: float
    run_id: str | None = None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LeaseDoc:
        doc = json.loads(data)
        holder = Holder(**doc["holder"])
        return cls(holder, str(doc["renewed_at"]), float(doc["period_s"]), doc.get("run_id"))

    def age_s(self, now: datetime) -> float:
        return (now - datetime.fromisoformat(self.renewed_at)).total_seconds()


class LeaseBackend(ABC):
    """Conditional reads and writes of one lease object; ``token`` identifies a version."""

    where: str

    @abstractmethod
    def read(self) -> tuple[LeaseDoc, str] | None:
        """The lease and its version token, or None when there is none."""

    @abstractmethod
    def write(self, doc: LeaseDoc, token: str | None) -> bool:
        """Write ``doc`` if the lease is still at ``token`` (None: does not exist); False if not."""

    @abstractmethod
    def delete(self, token: str) -> None:
        """Remove the lease if it is still at ``token``."""


class Lease:
    """The lease of one store, held by ``holder`` (this process) once :meth:`acquire` returned."""

    def __init__(
        self, backend: LeaseBackend, holder: Holder | None = None, period_s: float = PERIOD_S
    ) -> None:
        self.backend = backend
        self.holder = holder or Holder.this_process()
        self.period_s = period_s
        self.run_id: str | None = None
        self._token: str | None = None
        self.taken_from: LeaseDoc | None = None  # the stale lease acquire took over, if any

    @property
    def held(self) -> bool:
        return self._token is not None

    def acquire(self, *, take_over: bool = False) -> None:
        """Own the run, or :class:`LeaseHeld` naming the owner (see the module docstring)."""
        current = self.backend.read()
        if current is not None:
            doc, token = current
            if doc.holder.id != self.holder.id:
                self._refuse_or_take(doc, take_over)
            self._write(token)
            return
        if not self._write(None):
            raise LeaseHeld(self._held_message(self._owner_now(), "took it at the same moment"))

    def renew(self, run_id: str | None = None) -> None:
        """Extend the lease (and record ``run_id``); :class:`LeaseLost` if another took it."""
        if run_id is not None:
            self.run_id = run_id
        if not self._write(self._token):
            owner = self._owner_now()
            self._token = None
            raise LeaseLost(
                f"run lease {self.backend.where}: taken over by "
                f"{owner.holder.describe() if owner else 'nobody (deleted)'}; this process no "
                "longer owns the run and stops before saving a checkpoint"
            )

    def check(self) -> None:
        """Before a checkpoint is saved: the lease is still ours (:class:`LeaseLost` if not)."""
        current = self.backend.read()
        if current is None or current[0].holder.id != self.holder.id:
            self.renew()  # fails: raises LeaseLost naming the owner (or that it was deleted)
            return
        self._token = current[1]

    def release(self) -> None:
        """Give the run up (the session ended); a failure is logged, never raised."""
        token, self._token = self._token, None
        if token is None:
            return
        try:
            current = self.backend.read()
            if current is not None and current[0].holder.id == self.holder.id:
                self.backend.delete(current[1])
        except StorageError as e:
            logger.warning("run lease %s not released (%s); it goes stale", self.backend.where, e)

    # -- helpers ------------------------------------------------------------------------------

    def _write(self, token: str | None) -> bool:
        now = _now().isoformat(timespec="seconds")
        doc = LeaseDoc(self.holder, now, self.period_s, self.run_id)
        if not self.backend.write(doc, token):
            return False
        back = self.backend.read()  # servers that ignore conditional headers: last writer wins
        if back is None or back[0].holder.id != self.holder.id:
            return False
        self._token = back[1]
        return True

    def _owner_now(self) -> LeaseDoc | None:
        current = self.backend.read()
        return current[0] if current else None

    def _refuse_or_take(self, doc: LeaseDoc, take_over: bool) -> None:
        age = doc.age_s(_now())
        stale = age > STALE_PERIODS * doc.period_s
        if _dead_here(doc.holder):
            logger.warning(
                "run lease %s: its holder %s is gone from this host; taking the run over",
                self.backend.where, doc.holder.describe(),
            )  # fmt: skip
        elif not stale:
            raise LeaseHeld(
                self._held_message(doc, f"last renewed {age:.0f} s ago, so it is alive")
                + "; stop that run first (its lease goes stale "
                f"{STALE_PERIODS * doc.period_s:.0f} s after its last renewal)"
            )
        elif not take_over:
            raise LeaseHeld(
                self._held_message(doc, f"last renewed {age:.0f} s ago: stale")
                + "; if that process is gone, resume with --take-over"
            )
        else:
            logger.warning(
                "run lease %s: taking the run over from %s (last renewed %.0f s ago)",
                self.backend.where, doc.holder.describe(), age,
            )  # fmt: skip
        self.taken_from = doc

    def _held_message(self, doc: LeaseDoc | None, why: str) -> str:
        owner = doc.holder.describe() if doc else "another process"
        run = f" (MLflow run {doc.run_id})" if doc and doc.run_id else ""
        return f"run lease {self.backend.where}: the run is owned by {owner}{run}, {why}"


def _now() -> datetime:
    return datetime.now(UTC)


def _dead_here(holder: Holder) -> bool:
    """Whether ``holder`` was a process of this host that no longer runs (or is another run of
    a reused pid: its lease cannot be ours since our holder id is new)."""
    if holder.host != socket.gethostname():
        return False
    if holder.pid == os.getpid():
        return holder.started_at != _PROCESS_START  # same pid, another process
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it runs (as another user)
    return False


class LocalLeaseBackend(LeaseBackend):
    """``<root>/lease.json``; changes serialised by ``flock`` on the directory ``<root>``."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LEASE_NAME
        self.where = str(self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # The store's directory itself is the lock: no lock file beside the checkpoints.
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise StorageError(f"run lease {self.where}: cannot open its lock: {e}") from e
        try:
            with contextlib.suppress(OSError):  # no flock here: the read-back still checks
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> tuple[LeaseDoc, str] | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageError(f"run lease {self.where}: cannot read it: {e}") from e
        return _decode(data, self.where), _token(data)

    def read(self) -> tuple[LeaseDoc, str] | None:
        with self._locked():
            return self._read()

    def write(self, doc: LeaseDoc, token: str | None) -> bool:
        with self._locked():
            current = self._read()
            if (current[1] if current else None) != token:
                return False
            try:
                write_atomic(self.path, doc.to_bytes())
            except OSError as e:
                raise StorageError(f"run lease {self.where}: cannot write it: {e}") from e
            return True

    def delete(self, token: str) -> None:
        with self._locked():
            current = self._read()
            if current is not None and current[1] == token:
                self.path.unlink(missing_ok=True)


class S3LeaseBackend(LeaseBackend):
    """``s3://bucket/prefix/lease.json`` with S3 conditional writes (module docstring)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.key = store._key(LEASE_NAME)
        self.where = f"s3://{store.bucket}/{self.key}"

    def read(self) -> tuple[LeaseDoc, str] | None:
        from minio.error import S3Error

        store = self.store
        with store._errors(f"reading run lease {self.where}"):
            try:
                response = store._client.get_object(store.bucket, self.key)
            except S3Error as e:
                if e.code == "NoSuchKey":
                    return None
                raise
            try:
                data = response.read()
                etag = str(response.headers.get("etag", "")).strip('"')
            finally:
                response.close()
                response.release_conn()
        return _decode(data, self.where), etag

    def write(self, doc: LeaseDoc, token: str | None) -> bool:
        from minio.error import S3Error

        store = self.store
        condition = {"If-None-Match": "*"} if token is None else {"If-Match": f'"{token}"'}
        headers = {"Content-Type": "application/json", **condition}
        with store._errors(f"writing run lease {self.where}"):
            try:
                # minio's put_object turns unknown headers into user metadata; _put_object is the
                # plain PutObject request with these headers as given.
                store._client._put_object(store.bucket, self.key, doc.to_bytes(), headers)
            except S3Error as e:
                if e.code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                    return False
                raise
        return True

    def delete(self, token: str) -> None:
        store = self.store
        with store._errors(f"deleting run lease {self.where}"):
            store._client.remove_object(store.bucket, self.key)


def lease_for(store: CheckpointStore, *, period_s: float = PERIOD_S) -> Lease:
    """The run lease of ``store`` (a local directory or an S3 prefix)."""
    from sarl.storage.local import LocalCheckpointStore

    if isinstance(store, LocalCheckpointStore):
        return Lease(LocalLeaseBackend(store.root), period_s=period_s)
    return Lease(S3LeaseBackend(store), period_s=period_s)


def _decode(data: bytes, where: str) -> LeaseDoc:
    try:
        return LeaseDoc.from_bytes(data)
    except (ValueError, KeyError, TypeError) as e:
        raise StorageError(
            f"run lease {where} is unreadable ({e}); if no run owns it, delete it"
        ) from e


def _token(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


__all__ = ["Holder", "Lease", "LeaseHeld", "LeaseLost", "lease_for"]
