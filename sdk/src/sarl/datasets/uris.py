"""Write and read parquet files at a local path or an ``s3://bucket/key`` URI (S3 or MinIO).

Called by ``sarl data prepare`` (:func:`write_parquet`) and by the evaluation job
(:func:`read_parquet`, ``<SARL_DATA_URI>/benchmarks/<name>.parquet``).

Atomicity: a local file is written to a hidden temp file in the target directory, fsynced and
renamed onto the final name (``os.replace`` is atomic on POSIX), so a reader never sees half a
dataset. On S3 the object is sent with one ``put_object``: a single PUT, or above minio's part
size a multipart upload, which S3 makes visible only when it completes; either way the key holds
the old object or the whole new one.

Remote calls use the checkpoint store's client settings (:mod:`sarl.storage.s3`): connect
timeout ``CONNECT_TIMEOUT`` s, read timeout ``READ_TIMEOUT`` s, up to ``RETRIES`` retries with
backoff on connection errors and HTTP 5xx. Credentials come from ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``), the endpoint from ``--endpoint-url`` or
``AWS_ENDPOINT_URL``. Failures raise :class:`~sarl.storage.base.StorageError` with one line.
pyarrow and minio are imported on use (the ``[local]`` extra brings both).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sarl.datasets.tables import DatasetError

if TYPE_CHECKING:
    from minio import Minio


def is_s3(uri: str) -> bool:
    return uri.strip().lower().startswith("s3://")


def join(base: str, *parts: str) -> str:
    """``base`` (a directory or ``s3://bucket/prefix``) joined with ``parts`` by ``/``."""
    return "/".join([base.rstrip("/"), *parts]) if base else "/".join(parts)


def split_s3(uri: str, field: str) -> tuple[str, str]:
    """``s3://bucket/a/b.parquet`` -> ``("bucket", "a/b.parquet")``; DatasetError naming
    ``field`` when there is no valid bucket or no key."""
    from sarl.spec.model_source import valid_bucket_name

    bucket, _, key = uri.strip()[len("s3://") :].partition("/")
    if not valid_bucket_name(bucket):
        raise DatasetError(f"{field}: {uri!r} has no valid bucket name (s3://bucket/prefix)")
    if not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise DatasetError(f"{field}: {uri!r} has an empty, '.' or '..' key segment")
    return bucket, key


def parquet_bytes(rows: Sequence[dict[str, Any]]) -> bytes:
    """``rows`` as one parquet file (schema inferred from the rows)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(rows)), buf)
    return buf.getvalue()


def write_parquet(
    rows: Sequence[dict[str, Any]], uri: str, *, endpoint_url: str | None = None
) -> str:
    """Write ``rows`` to ``uri`` atomically (see the module docstring); returns ``uri``."""
    data = parquet_bytes(rows)
    if is_s3(uri):
        bucket, key = split_s3(uri, "--out")
        _put(s3_client(endpoint_url), bucket, key, data, endpoint_url)
    else:
        write_atomic(Path(uri), data)
    return uri


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path`` (parents created), atomically: the checkpoint store's writer."""
    from sarl.durable import write_atomic as store_write

    path.parent.mkdir(parents=True, exist_ok=True)
    store_write(path, data)


def read_parquet(uri: str, *, endpoint_url: str | None = None) -> list[dict[str, Any]]:
    """Rows of the parquet file at ``uri``; DatasetError/StorageError naming it."""
    import pyarrow.parquet as pq

    if is_s3(uri):
        bucket, key = split_s3(uri, "data URI")
        source: Any = io.BytesIO(_get(s3_client(endpoint_url), bucket, key, endpoint_url))
    else:
        path = Path(uri.removeprefix("file://"))
        if not path.is_file():
            raise DatasetError(f"{uri}: no such file")
        source = path
    try:
        rows: list[dict[str, Any]] = pq.read_table(source).to_pylist()
    except Exception as e:  # pyarrow raises several unrelated types for a corrupt file
        raise DatasetError(f"{uri}: not a readable Parquet file: {e}") from e
    return rows


def s3_client(endpoint_url: str | None) -> Minio:
    """A minio client with the checkpoint store's timeouts and retries, credentials from env."""
    from minio import Minio

    from sarl.storage.base import StorageError
    from sarl.storage.s3 import CONNECT_TIMEOUT, READ_TIMEOUT, RETRIES, parse_endpoint

    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise StorageError(
            "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(and AWS_SESSION_TOKEN for temporary credentials)"
        )
    try:
        host, secure = parse_endpoint(endpoint_url)
    except ValueError as e:
        raise DatasetError(str(e).replace("storage.endpoint_url", "--endpoint-url")) from e
    import urllib3

    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=READ_TIMEOUT),
        retries=urllib3.Retry(
            total=RETRIES,
            backoff_factor=0.5,
            status_forcelist=(500, 502, 503, 504),
            raise_on_status=False,  # minio turns the last error response into a readable S3Error
        ),
    )
    return Minio(
        host,
        access_key=access,
        secret_key=secret,
        session_token=os.environ.get("AWS_SESSION_TOKEN"),
        secure=secure,
        region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        http_client=http,
    )


def _put(client: Minio, bucket: str, key: str, data: bytes, endpoint: str | None) -> None:
    with _errors(f"writing s3://{bucket}/{key}", endpoint):
        client.put_object(
            bucket, key, io.BytesIO(data), len(data), content_type="application/vnd.apache.parquet"
        )


def _get(client: Minio, bucket: str, key: str, endpoint: str | None) -> bytes:
    with _errors(f"reading s3://{bucket}/{key}", endpoint):
        response = client.get_object(bucket, key)
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()


@contextmanager
def _errors(what: str, endpoint: str | None) -> Iterator[None]:
    """Turn client and transport errors into one-line StorageErrors naming the object."""
    from minio.error import MinioException, S3Error
    from urllib3.exceptions import HTTPError

    from sarl.storage.base import StorageError

    where = endpoint or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
    try:
        yield
    except (MinioException, HTTPError, OSError) as e:
        cause = f"{e.code}: {e.message}" if isinstance(e, S3Error) else str(e)
        raise StorageError(f"{what} at {where} failed: {' '.join(cause.split())}") from e
