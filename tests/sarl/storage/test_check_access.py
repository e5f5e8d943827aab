"""check_access is the preflight before training: it fails fast with a one-line StorageError
naming the problem (missing bucket, unreachable endpoint, bad credentials, unwritable dir)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from minio import Minio

from sarl.storage import StorageError, open_store


def _one_line(e: pytest.ExceptionInfo[StorageError]) -> str:
    message = str(e.value)
    assert "\n" not in message
    return message


def test_local_check_access_creates_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "checkpoints"
    open_store(str(root)).check_access()
    assert root.is_dir()
    assert list(root.iterdir()) == []  # the probe file is removed


def test_local_check_access_fails_when_the_directory_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(StorageError) as e:
        open_store(str(tmp_path / "a-file" / "checkpoints")).check_access()
    assert "a-file/checkpoints is not writable" in _one_line(e)


def test_s3_check_access_passes_and_leaves_no_probe_object(
    s3_endpoint: str, bucket: str, minio_client: Minio
) -> None:
    open_store(f"s3://{bucket}/exp", endpoint_url=s3_endpoint).check_access()
    assert list(minio_client.list_objects(bucket, recursive=True)) == []


def test_s3_check_access_names_a_missing_bucket_and_does_not_create_it(
    s3_endpoint: str, s3_env: dict[str, str], minio_client: Minio
) -> None:
    with pytest.raises(StorageError) as e:
        open_store("s3://no-such-bucket/exp", endpoint_url=s3_endpoint).check_access()
    assert _one_line(e) == (
        f"bucket 'no-such-bucket' does not exist at {s3_endpoint}; "
        "create it or fix storage.checkpoint_uri"
    )
    assert not minio_client.bucket_exists("no-such-bucket")


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_s3_check_access_fails_fast_on_an_unreachable_endpoint(
    closed_port: int, s3_env: dict[str, str]
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}"
    started = time.monotonic()
    with pytest.raises(StorageError) as e:
        open_store("s3://bucket/exp", endpoint_url=endpoint).check_access()
    assert time.monotonic() - started < 5
    message = _one_line(e)
    assert message.startswith(f"checking bucket 'bucket' at {endpoint} failed:")
    assert "Connection refused" in message


def test_s3_save_to_an_unreachable_endpoint_raises_storage_error_after_retries(
    closed_port: int, s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sarl.storage.s3.RETRIES", 1)  # keep the backoff short in this test
    (tmp_path / "w.bin").write_bytes(b"w")
    store = open_store("s3://bucket/exp", endpoint_url=f"http://127.0.0.1:{closed_port}")
    with pytest.raises(StorageError) as e:
        store.save(1, tmp_path, {})
    assert "Connection refused" in _one_line(e)


@pytest.fixture
def iam_auth(s3_endpoint: str) -> Iterator[None]:
    """Make moto check credentials (it accepts any by default); only IAM-known keys pass."""
    requests.post(f"{s3_endpoint}/moto-api/reset-auth", data=b"0", timeout=5).raise_for_status()
    try:
        yield
    finally:
        requests.post(f"{s3_endpoint}/moto-api/reset-auth", data=b"inf", timeout=5)


def test_s3_check_access_with_bad_credentials_names_the_env_vars(
    s3_endpoint: str, bucket: str, iam_auth: None
) -> None:
    store = open_store(
        f"s3://{bucket}/exp", endpoint_url=s3_endpoint, access_key="WRONG", secret_key="WRONG"
    )
    with pytest.raises(StorageError) as e:
        store.check_access()
    message = _one_line(e)
    assert f"bucket '{bucket}' at {s3_endpoint} failed: InvalidAccessKeyId" in message
    assert "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in message


def test_endpoint_comes_from_aws_endpoint_url_when_not_given(
    s3_endpoint: str, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cluster jobs get the platform's S3 endpoint only through AWS_ENDPOINT_URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    open_store(f"s3://{bucket}/exp").check_access()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(StorageError):
        open_store(f"s3://{bucket}/exp").check_access()
