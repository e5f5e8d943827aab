"""Open the checkpoint store named by ``storage.checkpoint_uri``.

Called by the local experiment runner with the Experiment's ``StorageSpec``
(``open_store(spec.checkpoint_uri, endpoint_url=spec.endpoint_url)``). Parsing the URI and
resolving credentials happen here so the stores receive validated values; no I/O is done until
the caller runs ``check_access``/``save``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sarl.spec.model_source import valid_bucket_name
from sarl.storage.base import CheckpointStore, StorageError
from sarl.storage.local import LocalCheckpointStore
from sarl.storage.s3 import S3CheckpointStore
from sarl.storage.signing import CheckpointKey

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; ValueError naming the field when malformed."""
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(
            f"storage.checkpoint_uri: {uri!r} names no bucket; expected s3://bucket[/prefix]"
        )
    if not valid_bucket_name(bucket):
        raise ValueError(
            f"storage.checkpoint_uri: {uri!r} has an invalid bucket name {bucket!r} "
            "(3-63 characters: lowercase letters, digits, '.', '-')"
        )
    prefix = prefix.rstrip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(
            f"storage.checkpoint_uri: {uri!r} has an empty, '.' or '..' path segment in its prefix"
        )
    return bucket, prefix


def open_store(
    uri: str,
    *,
    endpoint_url: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    checkpoint_key: CheckpointKey | None = None,
) -> CheckpointStore:
    """The store for ``uri``: ``s3://bucket/prefix`` -> S3, else a local path (``file://`` ok).

    The S3 endpoint not passed explicitly comes from ``AWS_ENDPOINT_URL`` (unset: AWS S3).
    S3 credentials not passed explicitly come from ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), the region from ``AWS_REGION`` or
    ``AWS_DEFAULT_REGION`` (unset: discovered from the bucket). The checkpoint-signing key not
    passed explicitly comes from ``SARL_CHECKPOINT_KEY`` (unset: checkpoints unsigned, see
    :mod:`sarl.storage.signing`). Raises ValueError for a malformed URI, endpoint or key and
    StorageError when S3 credentials are missing.
    """
    uri = uri.strip()
    key = checkpoint_key or CheckpointKey.from_env(os.environ)
    scheme_match = _SCHEME.match(uri)
    scheme = scheme_match.group(1).lower() if scheme_match else None
    if scheme == "s3":
        return _open_s3(uri, endpoint_url, access_key, secret_key, key)
    if scheme not in (None, "file"):
        raise ValueError(
            f"storage.checkpoint_uri: unsupported scheme {scheme!r} in {uri!r}; "
            "use s3://bucket/prefix or a local path"
        )
    path = uri[len("file://") :] if scheme == "file" else uri
    if not path:
        raise ValueError(f"storage.checkpoint_uri: {uri!r} names no directory")
    return LocalCheckpointStore(Path(path).expanduser(), key=key)


def _open_s3(
    uri: str,
    endpoint_url: str | None,
    access_key: str | None,
    secret_key: str | None,
    key: CheckpointKey | None,
) -> S3CheckpointStore:
    bucket, prefix = parse_s3_uri(uri)
    # The AWS SDKs' variable: cluster jobs get the platform's MinIO endpoint this way.
    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    from_env = access_key is None and secret_key is None
    access_key = access_key or os.environ.get("AWS_ACCESS_KEY_ID")
    secret_key = secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access_key or not secret_key:
        raise StorageError(
            f"no S3 credentials for {uri}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(and AWS_SESSION_TOKEN for temporary credentials)"
        )
    return S3CheckpointStore(
        bucket,
        prefix,
        endpoint_url=endpoint_url,
        access_key=access_key,
        secret_key=secret_key,
        # A session token belongs to the env key pair; never mix it with explicit keys.
        session_token=os.environ.get("AWS_SESSION_TOKEN") if from_env else None,
        region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        key=key,
    )
