"""Model directories in the object store (``sarl.storage.models``) against a real S3 server
(moto's, see conftest): an upload is used only once its manifest is written; a download is
atomic, verified and skipped when already complete; a tampered or half-written copy is refused;
``materialize`` turns each kind of ``spec.model.name`` into what a model loader takes."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest
from minio import Minio

from sarl.spec.model_source import MODEL_MANIFEST, parse_model_uri
from sarl.storage import StorageError
from sarl.storage.models import S3ModelStore, materialize
from tests.sarl.storage.conftest import read_tree, write_tree

FILES = {
    "config.json": b'{"model_type": "qwen3"}',
    "model.safetensors": bytes(range(256)) * 4096,
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}


def _store(bucket: str, endpoint: str, prefix: str = "models/qwen") -> S3ModelStore:
    return S3ModelStore(parse_model_uri(f"s3://{bucket}/{prefix}", "f"), endpoint_url=endpoint)


def _objects(client: Minio, bucket: str, prefix: str) -> list[str]:
    objs = client.list_objects(bucket, prefix=f"{prefix}/", recursive=True)
    return sorted(o.object_name.removeprefix(f"{prefix}/") for o in objs if o.object_name)


def test_upload_writes_the_files_as_they_are_and_the_manifest(
    tmp_path: Path, bucket: str, s3_endpoint: str, minio_client: Minio
) -> None:
    """KServe downloads the prefix as it is: the files keep their names, beside the manifest."""
    src = write_tree(tmp_path / "src", {**FILES, ".cache/huggingface/x.metadata": b"hub"})
    manifest = _store(bucket, s3_endpoint).upload(src, "hf://Qwen/Qwen3-0.6B")
    assert _objects(minio_client, bucket, "models/qwen") == sorted([*FILES, MODEL_MANIFEST])
    assert sorted(f.path for f in manifest.files) == sorted(FILES)
    assert manifest.source == "hf://Qwen/Qwen3-0.6B"


def test_download_round_trips_and_is_skipped_when_complete(
    tmp_path: Path, bucket: str, s3_endpoint: str, minio_client: Minio
) -> None:
    store = _store(bucket, s3_endpoint)
    store.upload(write_tree(tmp_path / "src", FILES), "local")
    dest = tmp_path / "work" / "models" / "qwen"
    store.download(dest)
    got = read_tree(dest)
    assert {k: v for k, v in got.items() if k != MODEL_MANIFEST} == FILES
    # A second download changes nothing: the local manifest matches the store's.
    minio_client.remove_object(bucket, "models/qwen/model.safetensors")  # would fail if fetched
    store.download(dest)
    assert read_tree(dest) == got
    assert [p.name for p in dest.parent.iterdir() if ".tmp-" in p.name] == []


def test_a_copy_without_its_manifest_is_refused(
    tmp_path: Path, bucket: str, s3_endpoint: str, minio_client: Minio
) -> None:
    """A half-done copy (files, no manifest yet) is never loaded."""
    for rel, data in FILES.items():
        minio_client.put_object(bucket, f"models/qwen/{rel}", io.BytesIO(data), len(data))
    with pytest.raises(StorageError, match="not completely copied.*sarl models copy"):
        _store(bucket, s3_endpoint).download(tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_file_changed_under_its_manifest_leaves_no_directory(
    tmp_path: Path, bucket: str, s3_endpoint: str, minio_client: Minio
) -> None:
    store = _store(bucket, s3_endpoint)
    store.upload(write_tree(tmp_path / "src", FILES), "local")
    minio_client.put_object(bucket, "models/qwen/config.json", io.BytesIO(b"{}"), 2)
    with pytest.raises(StorageError, match="another sha256"):
        store.download(tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../b", MODEL_MANIFEST])
def test_a_manifest_naming_paths_outside_the_model_is_refused(
    tmp_path: Path, bucket: str, s3_endpoint: str, minio_client: Minio, path: str
) -> None:
    doc = {
        "format": "sarl-model", "version": 1, "source": "x", "created_at": "now",
        "files": [{"path": path, "size": 1, "sha256": "0" * 64}],
    }  # fmt: skip
    data = json.dumps(doc).encode()
    minio_client.put_object(bucket, f"models/qwen/{MODEL_MANIFEST}", io.BytesIO(data), len(data))
    with pytest.raises(StorageError, match="unsafe file path"):
        _store(bucket, s3_endpoint).download(tmp_path / "dest")
    assert not (tmp_path / "escape.txt").exists()


def test_replacing_a_copy_removes_the_old_files(
    tmp_path: Path, bucket: str, s3_endpoint: str, minio_client: Minio
) -> None:
    store = _store(bucket, s3_endpoint)
    store.upload(write_tree(tmp_path / "old", {**FILES, "stale.bin": b"old"}), "old")
    store.upload(write_tree(tmp_path / "new", FILES), "new")
    assert "stale.bin" not in _objects(minio_client, bucket, "models/qwen")


def test_the_prefix_is_a_directory_not_a_string_prefix(
    tmp_path: Path, bucket: str, s3_endpoint: str, minio_client: Minio
) -> None:
    """Replacing ``models/qwen`` leaves ``models/qwen-2`` alone."""
    _store(bucket, s3_endpoint, "models/qwen-2").upload(write_tree(tmp_path / "b", FILES), "b")
    _store(bucket, s3_endpoint).upload(write_tree(tmp_path / "a", FILES), "a")
    assert MODEL_MANIFEST in _objects(minio_client, bucket, "models/qwen-2")


def test_ranks_of_one_pod_download_once(tmp_path: Path, bucket: str, s3_endpoint: str) -> None:
    store = _store(bucket, s3_endpoint)
    store.upload(write_tree(tmp_path / "src", FILES), "local")
    dest = tmp_path / "work" / "qwen"
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            _store(bucket, s3_endpoint).download(dest)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {k: v for k, v in read_tree(dest).items() if k != MODEL_MANIFEST} == FILES


def test_materialize_each_kind(tmp_path: Path, bucket: str, s3_endpoint: str) -> None:
    _store(bucket, s3_endpoint).upload(write_tree(tmp_path / "src", FILES), "local")
    work = tmp_path / "work"
    local = materialize(f"s3://{bucket}/models/qwen", work, endpoint_url=s3_endpoint)
    assert Path(local) == work / "models" / bucket / "models" / "qwen"
    assert (Path(local) / "config.json").read_bytes() == FILES["config.json"]
    assert materialize("hf://Qwen/Qwen3-4B", work) == "Qwen/Qwen3-4B"
    assert materialize("Qwen/Qwen3-4B", work) == "Qwen/Qwen3-4B"
    assert materialize(str(tmp_path / "src"), work) == str(tmp_path / "src")
    with pytest.raises(StorageError, match="claim 'no-such-claim'"):
        materialize("pvc://no-such-claim/qwen", work)
