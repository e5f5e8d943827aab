"""``sarl models copy`` as a user runs it (the real command in a subprocess) against a real S3
server (moto's): a local model directory is copied with its manifest last and the copy loads;
a Hub id without network (HF_HUB_OFFLINE=1, no cache: all that can run here) and bad
destinations end in one ``error:`` line, exit 2, nothing written."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from minio import Minio

from sarl.spec.model_source import MODEL_MANIFEST
from tests.sarl.cli.conftest import RunCli
from tests.sarl.storage.conftest import ACCESS_KEY, SECRET_KEY, read_tree, write_tree

FILES = {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": b"\x00" * 70_000}


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty Hub cache
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    name = f"models-{uuid.uuid4().hex[:12]}"
    Minio(s3_endpoint.removeprefix("http://"), ACCESS_KEY, SECRET_KEY, secure=False).make_bucket(
        name
    )
    return name


def _keys(endpoint: str, bucket: str) -> list[str]:
    client = Minio(endpoint.removeprefix("http://"), ACCESS_KEY, SECRET_KEY, secure=False)
    return sorted(o.object_name or "" for o in client.list_objects(bucket, recursive=True))


def test_copies_a_local_directory_manifest_last(
    run_cli: RunCli, tmp_path: Path, s3_endpoint: str, bucket: str
) -> None:
    src = write_tree(tmp_path / "Qwen3-0.6B", FILES)
    dest = f"s3://{bucket}/models/Qwen3-0.6B"
    proc = run_cli("models", "copy", str(src), dest, "--endpoint-url", s3_endpoint)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"copying {src.resolve()} -> {dest}/"
    assert (
        "  uploaded config.json (23 B)" in lines
        and "  uploaded model.safetensors (70.0 kB)" in lines
    )
    assert lines[-1].startswith("done: 2 files, 70.0 kB;") and dest in lines[-1]
    prefix = "models/Qwen3-0.6B/"
    assert _keys(s3_endpoint, bucket) == sorted(prefix + k for k in [*FILES, MODEL_MANIFEST])
    # What a trainer then loads: the same files.
    from sarl.storage.models import materialize

    local = materialize(dest, tmp_path / "work", endpoint_url=s3_endpoint)
    assert {k: v for k, v in read_tree(Path(local)).items() if k != MODEL_MANIFEST} == FILES


def test_hub_id_without_network_is_one_error_line(
    run_cli: RunCli, s3_endpoint: str, bucket: str
) -> None:
    """The Hub path as far as it runs here: huggingface_hub offline (the fixture's
    HF_HUB_OFFLINE=1) with an empty cache; nothing is written to the store."""
    dest = f"s3://{bucket}/models/q"
    proc = run_cli("models", "copy", "Qwen/Qwen3-0.6B", dest, "--endpoint-url", s3_endpoint)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: SOURCE: Qwen/Qwen3-0.6B cannot be downloaded")
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert _keys(s3_endpoint, bucket) == []


@pytest.mark.parametrize(
    ("dest", "words"),
    [
        ("pvc://cache/qwen", "DEST: expected s3://bucket/prefix"),
        ("s3://{bucket}/../x", "DEST: the prefix"),
        ("s3://{bucket}", "DEST: s3://"),
        ("/tmp/model", "DEST: expected s3://bucket/prefix"),
    ],
)
def test_bad_destination(
    run_cli: RunCli, tmp_path: Path, s3_endpoint: str, bucket: str, dest: str, words: str
) -> None:
    src = write_tree(tmp_path / "m", FILES)
    proc = run_cli(
        "models", "copy", str(src), dest.format(bucket=bucket), "--endpoint-url", s3_endpoint
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and words in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _keys(s3_endpoint, bucket) == []


def test_source_neither_directory_nor_hub_id(
    run_cli: RunCli, s3_endpoint: str, bucket: str
) -> None:
    proc = run_cli(
        "models", "copy", "./no/such/dir", f"s3://{bucket}/m", "--endpoint-url", s3_endpoint
    )
    assert proc.returncode == 2
    assert "neither a local directory nor a Hub id" in proc.stderr
