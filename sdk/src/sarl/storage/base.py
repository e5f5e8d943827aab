"""Checkpoint store interface, the manifest format and the helpers both stores share.

A checkpoint is the set of files a trainer wrote for one step, stored under
``<root>/step-<step:08d>/files/...`` plus ``<root>/step-<step:08d>/manifest.json``. The manifest is
written last and deleted first, so it is the commit marker: a checkpoint is complete only when its
manifest exists, parses, and every file it lists exists with the listed size (sha256 is checked on
download, where the bytes are read anyway). Anything else under the root — a step without a
manifest, a manifest whose files are gone, a ``*.tmp-*`` directory of a killed save — is an
incomplete leftover: never listed, never resumed from, removed by ``prune``.

Signed checkpoints (issue 36): a store with a checkpoint key (``SARL_CHECKPOINT_KEY``,
:mod:`sarl.storage.signing`) signs the manifests it writes; ``latest`` and ``download`` refuse
(:class:`CheckpointRefused`) a manifest that is unsigned, signed with another key or changed
since, before any file is fetched, and ``download`` a file not matching its sha256. A refusal is
an error, never a silent fallback to an older checkpoint or step 0: the run fails naming the
checkpoint and the fix. ``list`` reads manifests only and does not verify; ``prune`` neither
counts nor deletes a step whose manifest does not verify. No key: nothing is signed or verified,
as before.

A checkpoint that several machines wrote (a multi-node verl job: each node holds its ranks'
shards) is saved in parts: :meth:`CheckpointStore.begin_parts`, then
:meth:`~CheckpointStore.save_part` on every machine into the same ``files/`` tree, then one
:meth:`~CheckpointStore.commit_parts` writes the manifest listing every part's files, so the
checkpoint stays invisible until all parts are stored.

Called by the local experiment runner through :func:`sarl.storage.open_store` (and, in parts,
by ``sarl_jobs.checkpoints``); the concrete
stores are :class:`~sarl.storage.local.LocalCheckpointStore` and
:class:`~sarl.storage.s3.S3CheckpointStore`.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sarl.storage.progress import Progress
from sarl.storage.signing import CheckpointKey, Signature, problem, sign

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
FILES_DIR = "files"
MANIFEST_FORMAT = "sarl-checkpoint"
MANIFEST_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_CHUNK = 1024 * 1024


class StorageError(RuntimeError):
    """A checkpoint store operation failed; the message is one line naming the URI and cause."""


class CheckpointRefused(StorageError):
    """A checkpoint that must not be loaded: its manifest does not verify with this namespace's
    key, or a file does not match the manifest. Nothing of it was loaded."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint: POSIX path relative to the checkpoint root, size, sha256 hex."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint as described by its manifest.

    ``uri`` names the step directory/prefix (e.g. ``s3://bucket/exp/step-00000020``);
    ``metadata`` is whatever the caller passed to ``save`` (e.g. the MLflow run id).
    """

    step: int
    uri: str
    created_at: str
    files: tuple[FileEntry, ...]
    # A dict is not hashable; leaving it out of the hash keeps the frozen dataclass hashable.
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)
    #: The manifest's signature (:mod:`sarl.storage.signing`); None when unsigned.
    signature: Signature | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def step_name(step: int) -> str:
    """Directory/prefix name of a step; zero-padded so names sort like numbers."""
    return f"step-{step:08d}"


def parse_step_name(name: str) -> int | None:
    """The step of a ``step-XXXXXXXX`` name, or None for anything else (temp dirs, probes)."""
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def check_step(step: int) -> None:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def is_safe_relpath(path: str) -> bool:
    """True for a relative POSIX path without '.'/'..'/empty parts.

    Manifests are read from storage other processes can write; refusing anything else keeps a
    tampered manifest from making ``download`` write outside its destination.
    """
    if not path or path.startswith("/") or "\\" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def checked_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON round-tripped copy of ``metadata``; fails before anything is uploaded."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(dict(metadata)))
    except (TypeError, ValueError) as e:
        raise ValueError(f"checkpoint metadata must be JSON-serializable: {e}") from e
    return copied


def source_files(local_dir: Path) -> builtins.list[tuple[Path, str]]:
    """Regular files under ``local_dir`` (recursively, symlinks to files followed) as
    ``(absolute path, POSIX path relative to local_dir)``, sorted by relative path."""
    if not local_dir.is_dir():
        raise ValueError(f"checkpoint directory {local_dir} does not exist or is not a directory")
    found: builtins.list[tuple[Path, str]] = []
    for dirpath, _dirnames, filenames in os.walk(local_dir):
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file():
                found.append((path, path.relative_to(local_dir).as_posix()))
    if not found:
        raise ValueError(f"checkpoint directory {local_dir} contains no files")
    return sorted(found, key=lambda item: item[1])


def hash_file(path: Path, relpath: str) -> FileEntry:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return FileEntry(path=relpath, size=size, sha256=digest.hexdigest())


def manifest_doc(info: CheckpointInfo) -> dict[str, Any]:
    """The manifest of ``info`` as JSON data, without its signature (what a signature covers)."""
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "step": info.step,
        "created_at": info.created_at,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in info.files],
        "metadata": info.metadata,
    }


def signed(info: CheckpointInfo, key: CheckpointKey | None) -> CheckpointInfo:
    """``info`` with its signature by ``key`` (unchanged, unsigned, without a key)."""
    if key is None:
        return info
    return dataclasses.replace(info, signature=sign(manifest_doc(info), key))


def encode_manifest(info: CheckpointInfo) -> bytes:
    doc = manifest_doc(info)
    if info.signature is not None:
        doc["signature"] = info.signature.to_json()
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def check_signature(info: CheckpointInfo, key: CheckpointKey | None) -> None:
    """Refuse ``info`` (:class:`CheckpointRefused`) when ``key`` is set and its manifest does not
    verify with it (:func:`sarl.storage.signing.problem`); no key: nothing to check."""
    if key is None:
        return
    why = problem(manifest_doc(info), info.signature, key)
    if why is not None:
        raise CheckpointRefused(
            f"checkpoint {info.uri} is not signed with this namespace's key: refusing to load "
            f"it; {why}. Only checkpoints written by this namespace's jobs (which sign with "
            "SARL_CHECKPOINT_KEY) are resumed: delete this step, or point "
            "storage.checkpoint_uri at a prefix only this namespace writes"
        )


def decode_manifest(data: bytes, step: int, uri: str) -> CheckpointInfo | None:
    """The manifest of ``step`` at ``uri``, or None (logged) when it is not a valid manifest."""
    try:
        return _decode_manifest(data, step, uri)
    except (ValueError, TypeError, KeyError) as e:
        logger.warning("ignoring checkpoint %s: unreadable manifest (%s)", uri, e)
        return None


def _decode_manifest(data: bytes, step: int, uri: str) -> CheckpointInfo:
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise ValueError("not a sarl checkpoint manifest")
    if doc.get("version") != MANIFEST_VERSION:
        raise ValueError(f"unsupported manifest version {doc.get('version')!r}")
    if doc["step"] != step:
        raise ValueError(f"manifest says step {doc['step']!r}, directory says {step}")
    files = []
    for raw in doc["files"]:
        path, size, sha = raw["path"], raw["size"], raw["sha256"]
        if not (isinstance(path, str) and is_safe_relpath(path)):
            raise ValueError(f"unsafe file path {path!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"bad size {size!r} for {path}")
        if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
            raise ValueError(f"bad sha256 for {path}")
        files.append(FileEntry(path=path, size=size, sha256=sha))
    metadata = doc.get("metadata", {})
    if not isinstance(metadata, dict) or not isinstance(doc["created_at"], str):
        raise ValueError("bad metadata or created_at")
    raw = doc.get("signature")
    signature = None if raw is None else Signature.from_json(raw)
    return CheckpointInfo(step, uri, doc["created_at"], tuple(files), metadata, signature)


def copy_and_hash(src: Path, dst: Path, relpath: str, progress: Callable[[int], None]) -> FileEntry:
    """Copy ``src`` to a new file ``dst`` and fsync it, hashing the bytes on the way."""
    digest = hashlib.sha256()
    size = 0
    with src.open("rb") as fin, dst.open("xb") as fout:
        while chunk := fin.read(_CHUNK):
            fout.write(chunk)
            digest.update(chunk)
            size += len(chunk)
            progress(len(chunk))
        fout.flush()
        os.fsync(fout.fileno())
    return FileEntry(path=relpath, size=size, sha256=digest.hexdigest())


class CheckpointStore(ABC):
    """Where checkpoints of one experiment live (a local directory or an S3 prefix).

    Subclasses implement ``check_access``, ``save`` and four primitives (``_step_numbers``,
    ``_load``, ``_fetch``, ``_delete``); listing, ``latest``, ``download`` and ``prune`` are built
    on those here so both stores share the completeness rules.
    """

    #: Root URI of the store (a local path or ``s3://bucket/prefix``).
    uri: str
    #: Signs the manifests this store writes and verifies the ones it resumes (None: neither).
    key: CheckpointKey | None = None

    @abstractmethod
    def check_access(self) -> None:
        """Preflight before training: raise StorageError if checkpoints could not be saved."""

    @abstractmethod
    def save(self, step: int, local_dir: Path, metadata: Mapping[str, Any]) -> CheckpointInfo:
        """Store every file under ``local_dir`` as checkpoint ``step`` (replacing an existing
        one) and return it; the manifest is written last, so a failed save is never complete."""

    @abstractmethod
    def _step_numbers(self) -> builtins.list[int]:
        """Steps that have a ``step-XXXXXXXX`` directory/prefix, complete or not."""

    @abstractmethod
    def _load(self, step: int) -> CheckpointInfo | None:
        """The checkpoint of ``step`` if it is complete (manifest + files with listed sizes)."""

    @abstractmethod
    def _fetch(
        self, info: CheckpointInfo, entry: FileEntry, target: Path, progress: Progress
    ) -> None:
        """Copy one file of ``info`` to the new file ``target``."""

    @abstractmethod
    def _delete(self, step: int) -> None:
        """Delete everything of ``step``, the manifest first."""

    def _delete_leftovers(self, before: int) -> builtins.list[int]:
        """Delete store-specific leftovers (e.g. temp dirs) of steps older than ``before``;
        return their steps.

        Nothing by default: S3 saves write straight under the step prefix, which ``_delete``
        covers.
        """
        return []

    def clean_leftovers(self) -> builtins.list[str]:
        """Remove what killed saves left behind and no running save owns; return the names.

        Called when a run starts, with the run's lock held. Nothing by default. The S3 store
        aborts incomplete multipart uploads initiated before it was opened (it has no locks to
        tell a dead save's objects from a running one's: a save replaces whatever its step
        prefix holds, and ``prune`` removes incomplete steps older than the newest checkpoint).
        """
        return []

    @abstractmethod
    def step_uri(self, step: int) -> str:
        """URI of the directory/prefix of ``step``."""

    # -- a checkpoint written by several machines (one part each) -----------------------------

    @abstractmethod
    def _put(self, step: int, src: Path, relpath: str, progress: Progress) -> FileEntry:
        """Store the local file ``src`` as ``files/<relpath>`` of ``step`` (no manifest)."""

    @abstractmethod
    def _put_manifest(self, step: int, data: bytes) -> None:
        """Write the manifest of ``step`` (the commit marker)."""

    def begin_parts(self, step: int) -> None:
        """Start checkpoint ``step`` saved in parts: an existing ``step`` stops being complete
        (manifest first) and is removed, so parts never mix with an older save's files."""
        check_step(step)
        self._delete(step)

    def save_part(self, step: int, local_dir: Path) -> tuple[FileEntry, ...]:
        """Store every file under ``local_dir`` (one machine's part) into ``step`` without a
        manifest; returns the entries to hand to :meth:`commit_parts`. Called on each machine
        after :meth:`begin_parts`; parts must not hold the same path with different bytes."""
        check_step(step)
        sources = source_files(Path(local_dir))
        total = sum(path.stat().st_size for path, _ in sources)
        with Progress(total, f"save part of step {step}") as progress:
            return tuple(self._put(step, path, rel, progress) for path, rel in sources)

    def commit_parts(
        self, step: int, parts: Sequence[Sequence[FileEntry]], metadata: Mapping[str, Any]
    ) -> CheckpointInfo:
        """Make ``step`` complete once every part is stored: write one manifest listing the files
        of all ``parts`` (what :meth:`save_part` returned on each machine), then check that the
        store holds each of them. StorageError (and no complete checkpoint) when a path comes
        from two parts with different bytes or a listed file is missing."""
        check_step(step)
        meta = checked_metadata(metadata)
        merged: dict[str, FileEntry] = {}
        for entry in (e for part in parts for e in part):
            seen = merged.setdefault(entry.path, entry)
            if seen != entry:
                raise StorageError(
                    f"checkpoint {self.step_uri(step)}: two parts wrote {entry.path} with "
                    "different contents; each machine must save files under its own names"
                )
        files = tuple(merged[path] for path in sorted(merged))
        info = signed(CheckpointInfo(step, self.step_uri(step), utc_now(), files, meta), self.key)
        self._put_manifest(step, encode_manifest(info))
        if self._load(step) is None:  # a part's file is missing or has another size
            self._delete(step)
            raise StorageError(
                f"checkpoint {self.step_uri(step)}: a file listed by a part is missing or "
                "incomplete in the store; not committed"
            )
        return info

    def list(self) -> builtins.list[CheckpointInfo]:
        """Complete checkpoints, ascending by step."""
        found = (self._load(step) for step in sorted(self._step_numbers()))
        return [info for info in found if info is not None]

    def latest(self) -> CheckpointInfo | None:
        """The newest complete checkpoint, or None when there is none. With a key, refuses it
        (:class:`CheckpointRefused`) when its manifest does not verify: never an older one
        instead, which would roll the run back without a word."""
        for step in sorted(self._step_numbers(), reverse=True):
            info = self._load(step)
            if info is not None:
                check_signature(info, self.key)
                return info
        return None

    def download(
        self, info: CheckpointInfo, dest: Path, *, only: Collection[str] | None = None
    ) -> Path:
        """Download ``info`` (or its files named in ``only``) into the directory ``dest``
        (created; must not hold files) with the layout ``save`` was given: the signature first
        (over all of ``info``), then each file's sha256 (:class:`CheckpointRefused`). Files land
        in a temp sibling renamed to ``dest`` only when all verified: complete or absent."""
        if info.uri != self.step_uri(info.step):
            raise ValueError(f"checkpoint {info.uri} does not belong to store {self.uri}")
        check_signature(info, self.key)
        if only is not None:
            info = dataclasses.replace(info, files=tuple(f for f in info.files if f.path in only))
        dest = Path(dest)
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise StorageError(f"cannot download {info.uri} to {dest}: it exists and is not empty")
        tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex}"
        try:
            tmp.mkdir(parents=True)
            with Progress(info.total_bytes, f"download step {info.step}") as progress:
                for entry in info.files:
                    target = tmp / entry.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    self._fetch(info, entry, target, progress)
                    _verify(target, entry, info.uri)
            if dest.exists():
                dest.rmdir()  # checked empty above; os.replace needs it gone or empty
            os.replace(tmp, dest)
        except OSError as e:
            raise StorageError(f"downloading {info.uri} to {dest} failed: {e}") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def prune(self, keep_last: int) -> builtins.list[int]:
        """Keep the newest ``keep_last`` complete checkpoints; delete older complete ones and
        incomplete leftovers of steps older than the newest complete one (newer incomplete steps
        may be a save in progress). Returns the deleted steps, ascending."""
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        listed = self.list()
        # With a key, a checkpoint whose signature does not verify (planted, or from another
        # namespace) neither counts towards keep_last nor is deleted: a planted newer step must
        # not make the run prune its own checkpoints, and it stays for the owner to inspect.
        foreign = {info.step for info in listed if not _verifies(info, self.key)}
        complete = [info.step for info in listed if info.step not in foreign]
        if not complete:
            return []
        keep, newest = set(complete[-keep_last:]), complete[-1]
        deleted = []
        for step in sorted(self._step_numbers()):
            if step in foreign:
                continue
            if step not in keep and (step in complete or step < newest):
                self._delete(step)
                deleted.append(step)
        deleted.extend(self._delete_leftovers(before=newest))
        return sorted(set(deleted))


def _verifies(info: CheckpointInfo, key: CheckpointKey | None) -> bool:
    """Whether ``info``'s manifest verifies with ``key`` (always, without a key)."""
    try:
        check_signature(info, key)
    except CheckpointRefused:
        return False
    return True


def _verify(path: Path, entry: FileEntry, uri: str) -> None:
    got = hash_file(path, entry.path)
    if got.size != entry.size or got.sha256 != entry.sha256:
        raise CheckpointRefused(
            f"checksum mismatch for {uri}/{FILES_DIR}/{entry.path}: manifest has "
            f"{entry.size} bytes sha256 {entry.sha256[:12]}…, downloaded {got.size} bytes "
            f"sha256 {got.sha256[:12]}…; refusing to load checkpoint {uri} (the file was "
            "changed after the checkpoint was written)"
        )
