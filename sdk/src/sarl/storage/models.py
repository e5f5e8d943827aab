"""Model directories in the object store: copied in whole, used only when complete.

Layout: the Hugging Face files of one model under ``s3://bucket/prefix/`` exactly as in the
model's directory (``config.json``, ``model-00001-of-00002.safetensors``, ...), so KServe's
storage initializer can download the prefix as it is, plus :data:`MODEL_MANIFEST` (files, sizes,
sha256, where the model came from), written last. A prefix without the manifest is a copy in
progress or a killed one: :meth:`S3ModelStore.download` refuses it.

Called by ``sarl models copy`` (:meth:`S3ModelStore.upload`) and by the trainer and evaluation
jobs through :func:`materialize`, which turns ``spec.model.name`` into what a model loader takes:
a Hub id, or a local directory (an ``s3://`` model downloaded once into the job's scratch
directory, atomically: a temporary sibling renamed into place when every file verified; a
``pvc://`` model where the operator mounted its claim). The S3 client, endpoint, credentials and
error wording are the checkpoint store's (:mod:`sarl.storage.s3`).
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from minio.deleteobjects import DeleteObject
from minio.error import S3Error

from sarl.spec.model_source import MODEL_MANIFEST, ModelUri, loader_path, parse_model_uri
from sarl.storage.base import (
    FileEntry,
    StorageError,
    hash_file,
    is_safe_relpath,
    source_files,
    utc_now,
)
from sarl.storage.factory import open_store
from sarl.storage.progress import Progress
from sarl.storage.s3 import PART_SIZE, S3CheckpointStore

logger = logging.getLogger(__name__)

MANIFEST_FORMAT: Final = "sarl-model"
MANIFEST_VERSION: Final = 1
_CHUNK: Final = 1024 * 1024
#: Called after each file with (relative path, bytes): ``sarl models copy`` prints a line.
FileDone = Callable[[str, int], None]


@dataclass(frozen=True)
class ModelManifest:
    """What a complete model copy holds; ``source`` is where it was copied from."""

    source: str
    created_at: str
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def encode(self) -> bytes:
        doc = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "source": self.source,
            "created_at": self.created_at,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> ModelManifest:
        """The manifest in ``data``; StorageError naming ``where`` when it is not one (it is
        read from a store others can write: paths that leave the model's directory are
        refused)."""
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
                raise ValueError("not a sarl model manifest")
            if doc.get("version") != MANIFEST_VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}")
            files = tuple(_entry(raw) for raw in doc["files"])
            return cls(str(doc["source"]), str(doc["created_at"]), files)
        except (ValueError, TypeError, KeyError) as e:
            raise StorageError(f"{where}: unreadable model manifest ({e})") from e


def _entry(raw: Any) -> FileEntry:
    path, size, sha = raw["path"], raw["size"], raw["sha256"]
    if not (isinstance(path, str) and is_safe_relpath(path)) or path == MODEL_MANIFEST:
        raise ValueError(f"unsafe file path {path!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"bad size {size!r} for {path}")
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        raise ValueError(f"bad sha256 for {path}")
    return FileEntry(path=path, size=size, sha256=sha)


class S3ModelStore:
    """One model directory ``s3://bucket/prefix`` (a parsed ``s3://`` :class:`ModelUri`)."""

    def __init__(self, source: ModelUri, *, endpoint_url: str | None = None) -> None:
        if source.kind != "s3":
            raise ValueError(f"{source.uri}: not an s3:// model")
        self.source = source
        store = open_store(source.uri, endpoint_url=endpoint_url)
        if not isinstance(store, S3CheckpointStore):  # open_store returns S3 for s3:// URIs
            raise TypeError(f"{source.uri}: expected an S3 store")
        # The checkpoint store's client: same endpoint, credentials, retries and error wording.
        self._s3 = store

    @property
    def uri(self) -> str:
        return self.source.uri

    def _key(self, rel: str) -> str:
        return f"{self.source.path}/{rel}"

    def read_manifest(self) -> ModelManifest | None:
        """The manifest, or None when the prefix holds no complete copy."""
        key = self._key(MODEL_MANIFEST)
        with self._s3._errors(f"reading s3://{self.source.bucket}/{key}"):
            try:
                response = self._s3._client.get_object(self.source.bucket, key)
            except S3Error as e:
                if e.code == "NoSuchKey":
                    return None
                raise
            try:
                data = response.read()
            finally:
                response.close()
                response.release_conn()
        return ModelManifest.decode(data, f"{self.uri}/{MODEL_MANIFEST}")

    def upload(
        self, local_dir: Path, source: str, on_file: FileDone | None = None
    ) -> ModelManifest:
        """Replace the prefix's content with the files under ``local_dir``: the old manifest is
        deleted first and the old files next (KServe downloads the whole prefix, so nothing of
        an earlier copy may stay), the new manifest written last."""
        s3, bucket = self._s3, self.source.bucket
        sources = [(p, rel) for p, rel in source_files(Path(local_dir)) if _model_file(rel)]
        self._clear()
        entries: list[FileEntry] = []
        total = sum(path.stat().st_size for path, _ in sources)
        with Progress(total, f"upload {self.uri}") as progress:
            for path, rel in sources:
                entry = hash_file(path, rel)
                key = self._key(rel)
                with s3._errors(f"uploading {path} to s3://{bucket}/{key}"):
                    s3._client.fput_object(
                        bucket, key, str(path), part_size=PART_SIZE, progress=progress
                    )
                entries.append(entry)
                if on_file is not None:
                    on_file(rel, entry.size)
        manifest = ModelManifest(source, utc_now(), tuple(entries))
        data = manifest.encode()
        key = self._key(MODEL_MANIFEST)
        with s3._errors(f"writing s3://{bucket}/{key}"):
            s3._client.put_object(
                bucket, key, io.BytesIO(data), len(data), content_type="application/json"
            )
        return manifest

    def _clear(self) -> None:
        s3, bucket = self._s3, self.source.bucket
        with s3._errors(f"deleting the old copy at {self.uri}"):
            s3._client.remove_object(bucket, self._key(MODEL_MANIFEST))
            keys = [
                obj.object_name
                for obj in s3._client.list_objects(bucket, prefix=self._key(""), recursive=True)
                if obj.object_name
            ]
            errors = list(s3._client.remove_objects(bucket, (DeleteObject(k) for k in keys)))
        if errors:
            raise StorageError(
                f"deleting the old copy at {self.uri} failed for {len(errors)} object(s), e.g. "
                f"{errors[0].name}: {errors[0].code}"
            )

    def download(self, dest: Path) -> ModelManifest:
        """Make ``dest`` a complete copy (skipped when its manifest already matches the store's).

        Files land in a temporary sibling, each verified against its sha256, the manifest last;
        the sibling is then renamed to ``dest``, so ``dest`` is complete or absent. Processes of
        one pod (a node's ranks) take turns on a lock file beside ``dest``."""
        manifest = self.read_manifest()
        if manifest is None:
            raise StorageError(
                f"{self.uri}: no {MODEL_MANIFEST} there, so the model is not completely copied "
                f"(a copy in progress or one that was killed); run `sarl models copy <model> "
                f"{self.uri}` to (re)copy it"
            )
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _locked(dest.parent / f".{dest.name}.lock"):
            if _local_manifest(dest) == manifest:
                logger.info("model %s: already in %s", self.uri, dest)
                return manifest
            self._download_into(manifest, dest)
        return manifest

    def _download_into(self, manifest: ModelManifest, dest: Path) -> None:
        s3, bucket = self._s3, self.source.bucket
        tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex}"
        try:
            tmp.mkdir()
            with Progress(manifest.total_bytes, f"download {self.uri}") as progress:
                for entry in manifest.files:
                    target = tmp / entry.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with s3._errors(f"downloading s3://{bucket}/{self._key(entry.path)}"):
                        s3._client.fget_object(bucket, self._key(entry.path), str(target))
                    got = hash_file(target, entry.path)
                    if (got.size, got.sha256) != (entry.size, entry.sha256):
                        raise StorageError(
                            f"{self.uri}/{entry.path}: {got.size} bytes with another sha256 "
                            "than the manifest lists; the copy changed under its manifest: run "
                            "`sarl models copy` again"
                        )
                    progress.update(entry.size)
            (tmp / MODEL_MANIFEST).write_bytes(manifest.encode())  # last: the copy is complete
            if dest.exists():  # an older or broken copy: replaced whole
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except OSError as e:
            raise StorageError(f"downloading {self.uri} to {dest} failed: {e}") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _model_file(rel: str) -> bool:
    """Whether ``rel`` belongs in a copy: not an old manifest, not huggingface_hub's download
    bookkeeping (``.cache/huggingface/`` that ``snapshot_download(local_dir=...)`` leaves)."""
    return rel != MODEL_MANIFEST and not rel.startswith(".cache/")


def _local_manifest(dest: Path) -> ModelManifest | None:
    try:
        return ModelManifest.decode((dest / MODEL_MANIFEST).read_bytes(), str(dest))
    except (OSError, StorageError):
        return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def materialize(
    name: str, workdir: Path, *, field: str = "spec.model.name", endpoint_url: str | None = None
) -> str:
    """What a model loader takes for the model ``name``: the Hub id of a Hub model (``hf://``
    stripped; HF_ENDPOINT/HF_HUB_OFFLINE decide where it comes from), the local directory of an
    ``s3://`` model (downloaded under ``<workdir>/models/``, :meth:`S3ModelStore.download`), of
    a ``pvc://`` model (mounted by the operator at :func:`sarl.spec.model_source.pvc_mount_path`)
    or of a local path. ValueError for the built-in model, which the caller builds."""
    source = parse_model_uri(name, field)
    if source.kind == "builtin":
        raise ValueError(f"{field}: the built-in model is built by the job, not fetched")
    if source.is_hub:
        return loader_path(source, workdir)
    local = source.local_dir(workdir)
    if source.kind == "s3":
        S3ModelStore(source, endpoint_url=endpoint_url).download(local)
    elif source.kind == "pvc" and not local.is_dir():
        raise StorageError(
            f"{field}: {source.uri} is not a directory at {local}; the claim {source.claim!r} "
            "is mounted there by the operator: check that the path exists on the claim"
        )
    return str(local)
