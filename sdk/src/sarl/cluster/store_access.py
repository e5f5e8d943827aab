"""What a tenant's object-store key may reach: its S3 policy and the URIs a spec may name.

One place for the per-namespace store identity of issue 36 (the prefixes themselves are
:func:`sarl.cluster.tenancy.store_prefixes`):

* :func:`store_policy` — the AWS IAM policy document of a tenant's key (MinIO/Silo accept the
  same JSON for ``mc admin policy create``): objects read-write under its own prefixes, read-only
  under ``shared/``, and ``s3:ListBucket`` only with an ``s3:prefix`` inside those. Printed by
  ``sarl tenant store-policy`` (IAM / external S3); the chart renders the same document for the
  bundled store's hook Job (charts/sarl-platform/templates/_tenant-store.tpl; a test keeps them
  equal).
* :func:`uri_violation` — whether an ``s3://`` URI of a spec stays inside those prefixes of the
  platform bucket; called by the operator's tenant policy (``sarl_operator.tenant_store``).

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

from sarl.cluster.tenancy import store_prefixes

#: IAM policy language version (the only current one).
POLICY_VERSION: Final = "2012-10-17"
#: What a key may do to the objects under its read-write prefixes. Multipart uploads are
#: ``s3:PutObject`` (CreateMultipartUpload, UploadPart, Complete) plus abort and list-parts.
READ_WRITE_ACTIONS: Final = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
READ_ONLY_ACTIONS: Final = ("s3:GetObject",)


def _bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"


def store_policy(namespace: str, bucket: str) -> dict[str, Any]:
    """The IAM policy of ``namespace``'s store key on ``bucket``.

    ``s3:ListBucket`` is granted only with an ``s3:prefix`` under the tenant's prefixes
    (``StringLike``, AWS's "Amazon S3 condition key examples"): listing the whole bucket, or
    another team's prefix, is refused. That condition key applies to ListBucket alone (MinIO
    refuses a policy that puts it on other actions), so ListBucketMultipartUploads is not
    granted: the store's clean-up of stale uploads then only logs, and the bucket's lifecycle
    rule removes them. No statement names ``mlflow/``: MLflow's artifacts go through the
    tracking server.
    """
    read_write, read_only = store_prefixes(namespace)
    arn = _bucket_arn(bucket)
    return {
        "Version": POLICY_VERSION,
        "Statement": [
            {
                "Sid": "ReadWriteOwnPrefixes",
                "Effect": "Allow",
                "Action": list(READ_WRITE_ACTIONS),
                "Resource": [f"{arn}/{prefix}*" for prefix in read_write],
            },
            {
                "Sid": "ReadShared",
                "Effect": "Allow",
                "Action": list(READ_ONLY_ACTIONS),
                "Resource": [f"{arn}/{prefix}*" for prefix in read_only],
            },
            {
                "Sid": "ListOwnAndShared",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [arn],
                "Condition": {
                    "StringLike": {"s3:prefix": [f"{p}*" for p in (*read_write, *read_only)]}
                },
            },
            {
                # minio-py and boto3 ask for the bucket's region before the first request.
                "Sid": "BucketLocation",
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation"],
                "Resource": [arn],
            },
        ],
    }


def allowed_uris(namespace: str, bucket: str, write: bool) -> tuple[str, ...]:
    """The ``s3://`` prefixes a spec of ``namespace`` may name on ``bucket`` (for messages)."""
    read_write, read_only = store_prefixes(namespace)
    prefixes = read_write if write else (*read_write, *read_only)
    return tuple(f"s3://{bucket}/{prefix}" for prefix in prefixes)


def uri_violation(uri: str, namespace: str, bucket: str, write: bool) -> str | None:
    """Why ``uri`` is outside what ``namespace`` may reach on the platform ``bucket`` (to write
    when ``write``, else to read, which ``shared/`` also allows), naming the allowed prefixes;
    None when it is inside, not ``s3://``, or on another bucket (a store of the tenant's own,
    reached with its own ``credentials_secret``). ``.``/``..`` segments are refused: a client or
    proxy that normalises paths would resolve them to another prefix."""
    if not bucket or not uri.startswith("s3://"):
        return None
    parts = urlsplit(uri)
    if parts.netloc.lower() != bucket.lower():
        return None
    key = parts.path.lstrip("/")
    allowed = ", ".join(f"{u}..." for u in allowed_uris(namespace, bucket, write))
    what = "write" if write else "read"
    if any(segment in (".", "..") for segment in key.split("/")):
        return f"{uri!r}: '.' and '..' segments are not allowed; name the key itself ({allowed})"
    read_write, read_only = store_prefixes(namespace)
    prefixes = read_write if write else (*read_write, *read_only)
    # A URI names a prefix or an object: `checkpoints/team-a` reaches `checkpoints/team-a/...`,
    # never `checkpoints/team-ab/...`.
    inside = f"{key.rstrip('/')}/"
    if any(inside.startswith(prefix) for prefix in prefixes):
        return None
    return (
        f"{uri!r} is outside namespace {namespace!r}'s part of the platform bucket "
        f"{bucket!r}, which its key cannot {what}; use {allowed}"
    )
