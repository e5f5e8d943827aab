"""A tenant's store policy and which URIs it may name (sdk/src/sarl/cluster/store_access.py)."""

from __future__ import annotations

import json

import pytest

from sarl.cluster.store_access import store_policy, uri_violation


def test_policy_grants_own_prefixes_read_write_and_shared_read_only() -> None:
    policy = store_policy("team-a", "sarl")
    rw, shared, listing, location = policy["Statement"]
    assert rw["Resource"] == [
        "arn:aws:s3:::sarl/checkpoints/team-a/*",
        "arn:aws:s3:::sarl/data/team-a/*",
        "arn:aws:s3:::sarl/models/team-a/*",
    ]
    assert "s3:PutObject" in rw["Action"] and "s3:DeleteObject" in rw["Action"]
    assert (shared["Action"], shared["Resource"]) == (
        ["s3:GetObject"],
        ["arn:aws:s3:::sarl/shared/*"],
    )
    assert listing["Action"] == ["s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [
        "checkpoints/team-a/*", "data/team-a/*", "models/team-a/*", "shared/*"]}}  # fmt: skip
    assert location["Action"] == ["s3:GetBucketLocation"]
    assert "mlflow" not in json.dumps(policy)


def test_policy_fits_minio_limit_for_the_longest_names() -> None:
    """`mc admin policy create` takes at most 2048 characters (MinIO's mc docs)."""
    text = json.dumps(store_policy("a" * 63, "b" * 63), separators=(",", ":"))
    assert len(text) < 2048


@pytest.mark.parametrize(
    ("uri", "write"),
    [
        ("s3://sarl/checkpoints/team-a/exp", True),
        ("s3://sarl/checkpoints/team-a", True),
        ("s3://sarl/data/team-a/train.parquet", True),
        ("s3://sarl/models/team-a/qwen/", False),
        ("s3://sarl/shared/models/qwen", False),
        ("s3://other-bucket/checkpoints/team-b/x", True),  # the tenant's own store
        ("/local/path", True),
        ("hf://Qwen/Qwen3-0.6B", False),
    ],
)
def test_inside_or_not_the_platform_bucket(uri: str, write: bool) -> None:
    assert uri_violation(uri, "team-a", "sarl", write) is None


@pytest.mark.parametrize(
    ("uri", "write"),
    [
        ("s3://sarl/checkpoints/team-b/x", True),
        ("s3://sarl/checkpoints/team-b/x", False),
        ("s3://sarl/checkpoints/team-ab/x", True),
        ("s3://sarl/checkpoints", True),
        ("s3://sarl/mlflow/1/abc", False),
        ("s3://sarl/shared/models/qwen", True),  # shared/ is read-only
        ("s3://sarl", False),
        ("s3://SARL/checkpoints/team-b/x", True),
        ("s3://sarl/checkpoints/team-a/../team-b/x", True),
    ],
)
def test_outside_is_refused_naming_the_allowed_prefixes(uri: str, write: bool) -> None:
    reason = uri_violation(uri, "team-a", "sarl", write)
    assert reason is not None
    assert "s3://sarl/checkpoints/team-a/..." in reason
    assert ("s3://sarl/shared/..." in reason) is (not write)
