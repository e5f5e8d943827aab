"""A checkpoint saved in parts (one per machine of a multi-node job) is one checkpoint, invisible
until the manifest listing every part is committed; for the local and the S3 store."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.storage import StorageError
from tests.sarl.storage.conftest import Harness, read_tree, write_tree

RANK0 = {"actor/model_world_size_2_rank_0.pt": b"r0" * 40, "data.pt": b"loader"}
RANK1 = {"actor/model_world_size_2_rank_1.pt": b"r1" * 40}


def test_parts_become_one_checkpoint_only_when_committed(harness: Harness, tmp_path: Path) -> None:
    store = harness.store
    store.save(4, write_tree(tmp_path / "old", {"x.pt": b"old"}), {})
    store.begin_parts(4)
    assert store.latest() is None  # the old step 4 stopped being complete first
    node0 = store.save_part(4, write_tree(tmp_path / "node0", RANK0))
    node1 = store.save_part(4, write_tree(tmp_path / "node1", RANK1))
    assert store.latest() is None  # every part is there, but no manifest yet
    info = store.commit_parts(4, [node0, node1], {"backend": "verl", "parts": 2})
    assert store.latest() == info
    assert [f.path for f in info.files] == sorted([*RANK0, *RANK1])
    got = read_tree(store.download(info, tmp_path / "restored"))
    assert got == {**RANK0, **RANK1}  # "x.pt" of the replaced save is gone


def test_a_part_that_did_not_arrive_is_never_committed(harness: Harness, tmp_path: Path) -> None:
    store = harness.store
    store.begin_parts(2)
    node0 = store.save_part(2, write_tree(tmp_path / "node0", RANK0))
    node1 = store.save_part(2, write_tree(tmp_path / "node1", RANK1))
    harness.remove(f"step-00000002/files/{node1[0].path}")  # lost behind the store's back
    with pytest.raises(StorageError, match="missing or incomplete in the store; not committed"):
        store.commit_parts(2, [node0, node1], {})
    assert store.latest() is None


def test_the_same_path_with_other_bytes_in_two_parts_is_refused(
    harness: Harness, tmp_path: Path
) -> None:
    store = harness.store
    store.begin_parts(1)
    node0 = store.save_part(1, write_tree(tmp_path / "node0", {"data.pt": b"a"}))
    node1 = store.save_part(1, write_tree(tmp_path / "node1", {"data.pt": b"b"}))
    with pytest.raises(StorageError, match="two parts wrote data.pt with different contents"):
        store.commit_parts(1, [node0, node1], {})
    assert store.latest() is None


def test_a_part_without_files_is_refused(harness: Harness, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist or is not a directory"):
        harness.store.save_part(1, tmp_path / "no-such-step")
