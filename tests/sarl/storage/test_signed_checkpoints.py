"""A store with a checkpoint key signs what it saves and refuses to resume or download a
checkpoint that is unsigned, signed with another key, or changed since, before fetching a file;
without a key it works unsigned as before. Both real stores: a directory and moto's S3 server."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sarl.storage import CheckpointRefused, open_store
from sarl.storage.signing import KEY_ENV, CheckpointKey
from tests.sarl.storage.conftest import Harness, read_tree

KEY_A = "team-a-key-0123456789abcdef"
KEY_B = "team-b-key-0123456789abcdef"
MANIFEST = "step-00000001/manifest.json"


def _reopened(harness: Harness, key: str | None, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """The same store opened again (as a restarted job does) with ``key`` in the environment."""
    if key is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, key)
    endpoint = getattr(harness.store, "endpoint_url", None)
    store = open_store(harness.uri, endpoint_url=endpoint)
    return Harness(harness.kind, harness.uri, store, harness.put, harness.remove, harness.names)


@pytest.fixture
def signed(
    harness: Harness, make_checkpoint: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> Harness:
    """Step 1 saved by team A's job (its key in the environment)."""
    store = _reopened(harness, KEY_A, monkeypatch)
    store.store.save(1, make_checkpoint(1), {"mlflow_run_id": "run-a"})
    return store


def test_saved_manifests_carry_the_signature_and_resume(signed: Harness, tmp_path: Path) -> None:
    info = signed.store.latest()
    assert info is not None and info.signature is not None
    assert info.signature.key_id == CheckpointKey(KEY_A.encode()).key_id
    signed.store.download(info, tmp_path / "out")
    assert sorted(read_tree(tmp_path / "out")) == sorted(f.path for f in info.files)


def test_an_unsigned_checkpoint_is_refused_when_a_key_is_set(
    harness: Harness, make_checkpoint: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _reopened(harness, None, monkeypatch).store.save(1, make_checkpoint(1), {})
    with pytest.raises(CheckpointRefused, match="not signed with this namespace's key: refusing"):
        _reopened(harness, KEY_A, monkeypatch).store.latest()


def test_another_namespaces_key_is_refused(
    signed: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CheckpointRefused, match="signed with another key"):
        _reopened(signed, KEY_B, monkeypatch).store.latest()


def test_a_changed_manifest_is_refused_and_nothing_is_downloaded(
    signed: Harness, tmp_path: Path
) -> None:
    info = signed.store.latest()
    assert info is not None
    doc = json.loads(_raw_manifest(signed))
    doc["metadata"]["mlflow_run_id"] = "run-b"
    signed.put(MANIFEST, json.dumps(doc).encode())
    with pytest.raises(CheckpointRefused, match="changed after signing"):
        signed.store.latest()
    # A manifest read before the change does not help: download checks the one it is given.
    forged = dataclasses.replace(info, metadata={"mlflow_run_id": "run-b"})
    with pytest.raises(CheckpointRefused, match="changed after signing"):
        signed.store.download(forged, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_changed_file_is_refused_and_the_checkpoint_directory_never_appears(
    signed: Harness, tmp_path: Path
) -> None:
    info = signed.store.latest()
    assert info is not None
    entry = next(f for f in info.files if f.path == "optimizer/state/rank0.pt")
    signed.put(f"step-00000001/files/{entry.path}", b"x" * entry.size)  # same size, new bytes
    with pytest.raises(CheckpointRefused, match="checksum mismatch .* refusing to load"):
        signed.store.download(signed.store.latest(), tmp_path / "out")  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_without_a_key_unsigned_and_signed_checkpoints_both_resume(
    signed: Harness,
    make_checkpoint: Callable[[int], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    plain = _reopened(signed, None, monkeypatch)
    assert plain.store.latest() is not None  # signed: readable without a key (nothing checked)
    plain.store.save(2, make_checkpoint(2), {})
    latest = plain.store.latest()
    assert latest is not None and latest.step == 2 and latest.signature is None
    plain.store.download(latest, tmp_path / "out")


def test_a_share_download_checks_the_whole_signed_manifest(signed: Harness, tmp_path: Path) -> None:
    info = signed.store.latest()
    assert info is not None
    signed.store.download(info, tmp_path / "out", only={"trainer_state.json"})
    assert sorted(read_tree(tmp_path / "out")) == ["trainer_state.json"]


def test_parts_are_committed_signed(
    harness: Harness, make_checkpoint: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _reopened(harness, KEY_A, monkeypatch).store
    store.begin_parts(3)
    part = store.save_part(3, make_checkpoint(3))
    info = store.commit_parts(3, [part], {"parts": 1})
    assert info.signature is not None
    assert store.latest() == info


def _raw_manifest(harness: Harness) -> bytes:
    info = harness.store.latest()
    assert info is not None
    if harness.kind == "local":
        return (Path(harness.uri) / MANIFEST).read_bytes()
    return json.dumps(
        {
            "format": "sarl-checkpoint", "version": 1, "step": info.step,
            "created_at": info.created_at, "metadata": info.metadata,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in info.files],
            "signature": info.signature.to_json() if info.signature else None,
        }
    ).encode()  # fmt: skip


def test_a_planted_newer_step_does_not_make_prune_delete_the_owners_checkpoints(
    signed: Harness, make_checkpoint: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Team B's job (its key) plants steps 5 and 6 in team A's store; team A's prune with
    keep_last 1 keeps its own step 1 (the newest that verifies) and leaves the planted steps for
    the owner to inspect instead of counting them as the newest."""
    planter = _reopened(signed, KEY_B, monkeypatch)
    planter.store.save(5, make_checkpoint(5), {})
    planter.store.save(6, make_checkpoint(6), {})
    owner = _reopened(signed, KEY_A, monkeypatch)
    assert owner.store.prune(keep_last=1) == []
    assert [info.step for info in owner.store.list()] == [1, 5, 6]
    owner.store.save(2, make_checkpoint(2), {})
    assert owner.store.prune(keep_last=1) == [1]
    assert [info.step for info in owner.store.list()] == [2, 5, 6]
