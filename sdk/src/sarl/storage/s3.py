"""Checkpoint store on S3 or an S3-compatible server (MinIO, Ceph, moto), via the ``minio`` client.

Layout: ``s3://<bucket>/<prefix>/step-XXXXXXXX/files/...`` and ``.../manifest.json``. A save
uploads every file (multipart above ``PART_SIZE``) and then the manifest, the commit marker; a
replace or delete removes the manifest first. Created by :func:`sarl.storage.open_store` for
``s3://`` checkpoint URIs.

Failure behaviour: requests have a connect timeout of ``CONNECT_TIMEOUT`` s and a read timeout of
``READ_TIMEOUT`` s (``check_access``: ``PROBE_READ_TIMEOUT`` s, one retry) and are retried up to
``RETRIES`` times with exponential backoff (0, 1, 2 s) on connection errors and HTTP
500/502/503/504 (urllib3 ``Retry``; POSTs — multipart create/complete, batch delete — are retried
only when the connection failed before sending, as urllib3 retries only idempotent methods after
that). When it still fails the operation raises :class:`~sarl.storage.base.StorageError` naming
the endpoint, bucket/key and cause, and since the manifest is uploaded only after every file,
nothing is marked complete: ``latest`` keeps returning the previous checkpoint.

Incomplete multipart uploads: minio aborts the upload of a file that failed, but that abort is a
request too, and it fails when the endpoint is down at that moment; a killed process aborts
nothing. Either way the upload stays open, invisible but billed. :meth:`S3CheckpointStore.
clean_leftovers` (called when a run starts, with the run's lock held) aborts the *stale* ones
under the store's prefix: those initiated before the store was opened, or with no initiation
time. The run's lock means no other live process saves this run, and this one has not started a
save yet, so such an upload belongs to a save that is gone; an upload initiated later (a live
save) is never touched. The times compare the server's clock with this machine's: a skew only
makes an upload of a save killed within it wait for the next start. A bucket lifecycle rule
(``AbortIncompleteMultipartUpload``, see docs/how-to/resume.md) is the backstop for uploads no
later run cleans (a run never started again, a key without permission to list uploads).
"""

from __future__ import annotations

import builtins
import io
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import certifi
import urllib3
from minio import Minio
from minio.datatypes import Upload
from minio.deleteobjects import DeleteObject
from minio.error import MinioException, S3Error, ServerError
from urllib3.exceptions import HTTPError, MaxRetryError

from sarl.storage.base import (
    FILES_DIR,
    MANIFEST_NAME,
    CheckpointInfo,
    CheckpointStore,
    FileEntry,
    StorageError,
    check_step,
    checked_metadata,
    decode_manifest,
    encode_manifest,
    hash_file,
    parse_step_name,
    signed,
    source_files,
    step_name,
    utc_now,
)
from sarl.storage.progress import Progress
from sarl.storage.signing import CheckpointKey

logger = logging.getLogger(__name__)

#: Multipart part size: 16 MiB keeps memory bounded (minio buffers up to 3 parallel parts).
PART_SIZE = 16 * 1024 * 1024
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
RETRIES = 3
#: check_access retries once and reads with the short timeout: a preflight against a wrong or
#: hung endpoint should fail in seconds, not after the upload client's minute-long read timeout.
PROBE_RETRIES = 1
PROBE_READ_TIMEOUT = 5.0
_CHUNK = 1024 * 1024
_AUTH_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
     "InvalidToken", "InvalidClientTokenId"}
)  # fmt: skip


def parse_endpoint(endpoint_url: str | None, secure: bool | None = None) -> tuple[str, bool]:
    """``http://127.0.0.1:9000`` -> ``("127.0.0.1:9000", False)``; None -> AWS S3 over https.

    An explicit ``secure`` overrides the scheme; without a scheme the default is https.
    """
    if not endpoint_url:
        return "s3.amazonaws.com", True if secure is None else secure
    url = endpoint_url.strip()
    if "://" not in url:
        url = f"{'http' if secure is False else 'https'}://{url}"
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 -- raises ValueError on a non-numeric/out-of-range port
        valid = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and parts.path in ("", "/")
            and not (parts.query or parts.fragment or parts.username)
        )
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(
            f"storage.endpoint_url: expected http(s)://host[:port], got {endpoint_url!r}"
        )
    return parts.netloc, (parts.scheme == "https") if secure is None else secure


def _http_client(retries: int, read_timeout: float) -> urllib3.PoolManager:
    """minio's default pool, with our timeouts and a bounded retry budget."""
    return urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=read_timeout),
        maxsize=10,
        cert_reqs="CERT_REQUIRED",
        ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
        retries=urllib3.Retry(
            total=retries,
            backoff_factor=0.5,
            status_forcelist=(500, 502, 503, 504),
            # Hand the last error response to minio, which turns its XML into a readable S3Error.
            raise_on_status=False,
        ),
    )


def _minio(
    endpoint: str,
    secure: bool,
    access_key: str,
    secret_key: str,
    session_token: str | None,
    region: str | None,
    *,
    retries: int,
    read_timeout: float,
) -> Minio:
    return Minio(
        endpoint,
        access_key=access_key,
        secret_key=secret_key,
        session_token=session_token,
        secure=secure,
        region=region,
        http_client=_http_client(retries, read_timeout),
    )


def _describe(exc: BaseException) -> str:
    """One-line cause of a client/transport error."""
    if isinstance(exc, S3Error):
        text = f"{exc.code}: {exc.message}"
    elif isinstance(exc, ServerError):
        text = f"HTTP {exc.status_code}: {exc}"
    elif isinstance(exc, MaxRetryError) and exc.reason is not None:
        text = str(exc.reason)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


class S3CheckpointStore(CheckpointStore):
    """Checkpoints under ``s3://bucket/prefix`` on AWS S3 or an S3-compatible endpoint.

    Constructing it does no I/O; call :meth:`check_access` to fail fast on a wrong endpoint,
    missing bucket or bad credentials before training starts.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None,
        access_key: str,
        secret_key: str,
        session_token: str | None = None,
        region: str | None = None,
        secure: bool | None = None,
        key: CheckpointKey | None = None,
    ) -> None:
        endpoint, is_secure = parse_endpoint(endpoint_url, secure)
        self.key = key  # signs and verifies manifests (sarl.storage.signing)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = f"{'https' if is_secure else 'http'}://{endpoint}"
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        client_args = (endpoint, is_secure, access_key, secret_key, session_token, region)
        self._client = _minio(*client_args, retries=RETRIES, read_timeout=READ_TIMEOUT)
        self._probe = _minio(*client_args, retries=PROBE_RETRIES, read_timeout=PROBE_READ_TIMEOUT)
        #: Uploads initiated before this are stale (see the module docstring).
        self.opened_at = datetime.now(UTC)

    # -- keys ---------------------------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _step_key(self, step: int, *parts: str) -> str:
        return self._key(step_name(step), *parts)

    def step_uri(self, step: int) -> str:
        return f"s3://{self.bucket}/{self._step_key(step)}"

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn client and transport errors into one-line StorageErrors."""
        try:
            yield
        except (MinioException, HTTPError, OSError) as e:
            hint = ""
            if isinstance(e, S3Error) and e.code in _AUTH_CODES:
                hint = " (check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and bucket permissions)"
            elif isinstance(e, S3Error) and e.code == "NoSuchBucket":
                hint = "; create it or fix storage.checkpoint_uri"
            raise StorageError(f"{what} at {self.endpoint_url} failed: {_describe(e)}{hint}") from e

    # -- public API ---------------------------------------------------------------------------

    def check_access(self) -> None:
        """Endpoint reachable, bucket exists (never created here), a probe object can be written
        and deleted.

        The bucket is checked by listing the store's own prefix, not by HeadBucket: S3 authorises
        HeadBucket as an ``s3:ListBucket`` without prefix, which a tenant's key limited to its
        prefixes (``sarl.cluster.store_access``) is refused."""
        exists = True
        with self._errors(f"checking bucket '{self.bucket}'"):
            try:
                root = self._key("") + "/" if self.prefix else ""
                next(iter(self._probe.list_objects(self.bucket, prefix=root)), None)
            except S3Error as e:
                if e.code != "NoSuchBucket":
                    raise
                exists = False
        if not exists:
            raise StorageError(
                f"bucket '{self.bucket}' does not exist at {self.endpoint_url}; "
                "create it or fix storage.checkpoint_uri"
            )
        probe = self._key(f".sarl-access-probe-{os.urandom(8).hex()}")
        with self._errors(f"writing probe object s3://{self.bucket}/{probe}"):
            self._probe.put_object(self.bucket, probe, io.BytesIO(b"sarl"), 4)
            self._probe.remove_object(self.bucket, probe)

    def clean_leftovers(self) -> builtins.list[str]:
        """Abort the stale incomplete multipart uploads under the store's prefix (rule in the
        module docstring); return their keys. A failure to list or abort is logged, not raised:
        it must not stop a run, and the bucket's lifecycle rule removes what is left."""
        aborted: builtins.list[str] = []
        try:
            with self._errors(f"listing incomplete uploads under {self.uri}"):
                stale = [u for u in self._uploads() if is_stale(u.initiated_time, self.opened_at)]
            for upload in stale:
                key = upload.object_name
                with self._errors(f"aborting the upload of s3://{self.bucket}/{key}"):
                    # minio has no public call for this; the private one is the S3 request.
                    self._client._abort_multipart_upload(self.bucket, key, upload.upload_id or "")
                aborted.append(key)
        except StorageError as e:
            logger.warning("%s; left to the bucket's lifecycle rule", e)
        if aborted:
            logger.info("aborted %d incomplete upload(s) of killed saves", len(aborted))
        return aborted

    def _uploads(self) -> Iterator[Upload]:
        """Incomplete multipart uploads under the store's prefix, page by page."""
        root = self._key("") + "/" if self.prefix else ""
        key_marker: str | None = None
        upload_id_marker: str | None = None
        while True:
            page = self._client._list_multipart_uploads(
                self.bucket, prefix=root or None, key_marker=key_marker,
                upload_id_marker=upload_id_marker,
            )  # fmt: skip
            yield from (u for u in page.uploads if u.object_name.startswith(root))
            if not page.is_truncated or not page.uploads:
                return
            # minio 7.2 drops NextUploadIdMarker; the last upload of the page is the same marker.
            key_marker, upload_id_marker = page.uploads[-1].object_name, page.uploads[-1].upload_id

    def save(self, step: int, local_dir: Path, metadata: Mapping[str, Any]) -> CheckpointInfo:
        check_step(step)
        meta = checked_metadata(metadata)
        sources = source_files(Path(local_dir))
        entries = tuple(hash_file(path, rel) for path, rel in sources)
        info = signed(CheckpointInfo(step, self.step_uri(step), utc_now(), entries, meta), self.key)
        manifest = encode_manifest(info)
        self._delete(step)  # replacing: manifest first, then the old files
        with Progress(info.total_bytes, f"save step {step}") as progress:
            for (path, _rel), entry in zip(sources, entries, strict=True):
                key = self._step_key(step, FILES_DIR, entry.path)
                with self._errors(f"uploading {path} to s3://{self.bucket}/{key}"):
                    self._client.fput_object(
                        self.bucket, key, str(path), part_size=PART_SIZE, progress=progress
                    )
        key = self._step_key(step, MANIFEST_NAME)
        with self._errors(f"writing manifest s3://{self.bucket}/{key}"):
            self._client.put_object(
                self.bucket, key, io.BytesIO(manifest), len(manifest),
                content_type="application/json",
            )  # fmt: skip
        return info

    def _put(self, step: int, src: Path, relpath: str, progress: Progress) -> FileEntry:
        entry = hash_file(src, relpath)
        key = self._step_key(step, FILES_DIR, relpath)
        with self._errors(f"uploading {src} to s3://{self.bucket}/{key}"):
            self._client.fput_object(
                self.bucket, key, str(src), part_size=PART_SIZE, progress=progress
            )
        return entry

    def _put_manifest(self, step: int, data: bytes) -> None:
        key = self._step_key(step, MANIFEST_NAME)
        with self._errors(f"writing manifest s3://{self.bucket}/{key}"):
            self._client.put_object(
                self.bucket, key, io.BytesIO(data), len(data), content_type="application/json"
            )

    # -- primitives ---------------------------------------------------------------------------

    def _step_numbers(self) -> builtins.list[int]:
        root = self._key("") + "/" if self.prefix else ""
        steps = []
        with self._errors(f"listing {self.uri}"):
            for obj in self._client.list_objects(self.bucket, prefix=root or None):
                name = (obj.object_name or "")[len(root) :]
                step = parse_step_name(name.rstrip("/")) if obj.is_dir else None
                if step is not None:
                    steps.append(step)
        return sorted(steps)

    def _load(self, step: int) -> CheckpointInfo | None:
        data = self._read_manifest(step)
        if data is None:
            logger.debug("skipping %s: no manifest (incomplete save)", self.step_uri(step))
            return None
        info = decode_manifest(data, step, self.step_uri(step))
        if info is None:
            return None
        files = self._step_key(step, FILES_DIR) + "/"
        with self._errors(f"listing {self.step_uri(step)}"):
            sizes = {
                obj.object_name: obj.size
                for obj in self._client.list_objects(self.bucket, prefix=files, recursive=True)
            }
        for entry in info.files:
            if sizes.get(files + entry.path) != entry.size:
                logger.warning(
                    "ignoring checkpoint %s: %s missing or wrong size", info.uri, entry.path
                )
                return None
        return info

    def _read_manifest(self, step: int) -> bytes | None:
        key = self._step_key(step, MANIFEST_NAME)
        with self._errors(f"reading s3://{self.bucket}/{key}"):
            try:
                response = self._client.get_object(self.bucket, key)
            except S3Error as e:
                if e.code == "NoSuchKey":
                    return None
                raise
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

    def _fetch(
        self, info: CheckpointInfo, entry: FileEntry, target: Path, progress: Progress
    ) -> None:
        key = self._step_key(info.step, FILES_DIR, entry.path)
        with self._errors(f"downloading s3://{self.bucket}/{key}"):
            response = self._client.get_object(self.bucket, key)
            try:
                with target.open("xb") as f:
                    for chunk in response.stream(_CHUNK):
                        f.write(chunk)
                        progress.update(len(chunk))
            finally:
                response.close()
                response.release_conn()

    def _delete(self, step: int) -> None:
        prefix = self._step_key(step) + "/"
        with self._errors(f"deleting {self.step_uri(step)}"):
            self._client.remove_object(self.bucket, self._step_key(step, MANIFEST_NAME))
            keys = [
                obj.object_name
                for obj in self._client.list_objects(self.bucket, prefix=prefix, recursive=True)
                if obj.object_name
            ]
            # remove_objects is lazy: the deletes happen while its error iterator is consumed.
            errors = builtins.list(
                self._client.remove_objects(self.bucket, (DeleteObject(k) for k in keys))
            )
        if errors:
            first = errors[0]
            raise StorageError(
                f"deleting {self.step_uri(step)} at {self.endpoint_url} failed for "
                f"{len(errors)} object(s), e.g. {first.name}: {first.code}: {first.message}"
            )


def is_stale(initiated: datetime | None, opened_at: datetime) -> bool:
    """Whether an incomplete upload initiated at ``initiated`` (None: the server did not say)
    belongs to a save that is gone, for a store opened at ``opened_at`` (module docstring)."""
    return initiated is None or initiated < opened_at
