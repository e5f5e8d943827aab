"""A restarted cluster job resumes from the newest complete checkpoint in the store.

Real stores: a local directory and a moto S3 server (over HTTP, through the minio client)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("minio")  # sarl.storage's S3 client (the [local] extra)

from minio import Minio

from sarl.spec.experiment import Experiment
from sarl.storage import StorageError, open_store
from sarl_jobs.node_restore import download_wait_s
from sarl_jobs.resume import (
    VERL_TRACKER,
    StoreSettings,
    restore_trl,
    restore_verl,
    restore_verl_share,
    verl_node_order,
    verl_share,
)


def _saved(tmp_path: Path, store_uri: str, steps: list[int], **kw: str | None) -> StoreSettings:
    store = open_store(store_uri, **kw)
    for step in steps:
        src = tmp_path / f"src-{step}"
        (src / "actor").mkdir(parents=True)
        (src / "actor" / "model.pt").write_bytes(bytes([step]) * 32)
    for step in steps:
        store.save(step, tmp_path / f"src-{step}", {"backend": "verl"})
    return StoreSettings(uri=store_uri, endpoint_url=kw.get("endpoint_url"), keep_last=3)


def test_verl_gets_the_newest_step_and_its_tracker(tmp_path: Path) -> None:
    settings = _saved(tmp_path, str(tmp_path / "store"), [2, 4])
    ckpt = tmp_path / "ckpt"
    assert restore_verl(settings, ckpt) == 4
    assert (ckpt / VERL_TRACKER).read_text() == "4"
    assert (ckpt / "global_step_4" / "actor" / "model.pt").read_bytes() == bytes([4]) * 32
    assert not (ckpt / "global_step_2").exists()


def test_newer_local_checkpoint_wins_and_nothing_is_downloaded(tmp_path: Path) -> None:
    settings = _saved(tmp_path, str(tmp_path / "store"), [2])
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_6").mkdir(parents=True)
    (ckpt / VERL_TRACKER).write_text("6")
    assert restore_verl(settings, ckpt) == 6
    assert not (ckpt / "global_step_2").exists()


def test_unfinished_local_save_is_replaced(tmp_path: Path) -> None:
    settings = _saved(tmp_path, str(tmp_path / "store"), [4])
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_4" / "actor").mkdir(parents=True)  # killed mid-save: no tracker update
    (ckpt / "global_step_4" / "actor" / "partial.pt").write_bytes(b"x")
    (ckpt / "global_step_2").mkdir()
    (ckpt / VERL_TRACKER).write_text("2")
    assert restore_verl(settings, ckpt) == 4
    assert sorted(p.name for p in (ckpt / "global_step_4" / "actor").iterdir()) == ["model.pt"]


@pytest.mark.parametrize("uri", [None, "empty"])
def test_no_uri_or_empty_store_means_from_scratch(tmp_path: Path, uri: str | None) -> None:
    store_uri = str(tmp_path / "store") if uri else None
    settings = StoreSettings(uri=store_uri, endpoint_url=None, keep_last=3)
    assert restore_verl(settings, tmp_path / "ckpt") is None
    assert restore_trl(settings, tmp_path / "out") is None
    assert not (tmp_path / "ckpt").exists()


def test_trl_layout(tmp_path: Path) -> None:
    settings = _saved(tmp_path, str(tmp_path / "store"), [3, 5])
    out = tmp_path / "out"
    resumed = restore_trl(settings, out)
    assert resumed == out / "checkpoint-5"
    assert (resumed / "actor" / "model.pt").exists()
    (out / "checkpoint-7").mkdir()  # a newer save cut short: no trainer_state.json yet
    (out / "checkpoint-7" / "model.safetensors").write_bytes(b"half")
    assert restore_trl(settings, out) == out / "checkpoint-5"
    (out / "checkpoint-9").mkdir()  # a newer complete local save
    (out / "checkpoint-9" / "trainer_state.json").write_text("{}")
    assert restore_trl(settings, out) == out / "checkpoint-9"


def test_trl_multi_node_takes_the_store_over_a_partial_local_save(tmp_path: Path) -> None:
    """A restarted container keeps its scratch: another node's ``checkpoint-N`` holds only its
    RNG state, and a save cut short leaves a newer directory; the store's checkpoint wins."""
    settings = _saved(tmp_path, str(tmp_path / "store"), [3, 5])
    out = tmp_path / "out"
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "rng_state_1.pth").write_bytes(b"rng")
    (out / "checkpoint-7").mkdir()  # half-written, never uploaded
    resumed = restore_trl(settings, out, local_wins=False)
    assert resumed == out / "checkpoint-5"
    assert (resumed / "actor" / "model.pt").exists()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-5"]
    empty = StoreSettings(uri=str(tmp_path / "empty"), endpoint_url=None, keep_last=3)
    assert restore_trl(empty, out, local_wins=False) is None
    assert list(out.iterdir()) == []


def test_settings_come_from_the_operator_env_first() -> None:
    exp = Experiment.model_validate(
        {"metadata": {"name": "job"}, "spec": {"preset": "paper-grpo-math"}}
    )
    env = {"SARL_CHECKPOINT_URI": "s3://b/ckpt/ns/job", "AWS_ENDPOINT_URL": "http://minio:9000"}
    settings = StoreSettings.resolve(exp, env)
    assert (settings.uri, settings.endpoint_url) == ("s3://b/ckpt/ns/job", "http://minio:9000")
    assert StoreSettings.resolve(exp, {}).uri == exp.spec.storage.checkpoint_uri


def test_s3_store_resume_and_unreadable_store_raises(
    tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    bucket = f"resume-{uuid.uuid4().hex[:8]}"
    Minio(s3_endpoint.removeprefix("http://"), "testing", "testing", secure=False).make_bucket(
        bucket
    )
    settings = _saved(tmp_path, f"s3://{bucket}/ckpt", [7], endpoint_url=s3_endpoint)
    assert restore_verl(settings, tmp_path / "ckpt") == 7
    missing = StoreSettings(uri="s3://no-such-bucket/x", endpoint_url=s3_endpoint, keep_last=1)
    with pytest.raises(StorageError):
        restore_verl(missing, tmp_path / "ckpt2")


# ---- multi-node verl: each node its share (issue 35 item 9) ----

#: A 2-node x 2-GPU verl checkpoint as verl 0.9.1's FSDPCheckpointManager lays it out
#: (``save_checkpoint``: per-rank model/optim/extra_state, ``huggingface/`` config and tokenizer
#: on rank 0, the full HF model with ``save_contents: [hf_model]``), plus the driver's data.pt
#: and sarl's tracking spool.
VERL_FILES = [
    *(f"{role}/{kind}_world_size_4_rank_{r}.pt"
      for role in ("actor", "critic") for kind in ("model", "optim", "extra_state")
      for r in range(4)),
    "actor/fsdp_config.json",
    "actor/huggingface/config.json",
    "actor/huggingface/tokenizer.json",
    "actor/huggingface/model-00001-of-00002.safetensors",
    "actor/huggingface/model-00002-of-00002.safetensors",
    "actor/huggingface/model.safetensors.index.json",
    "data.pt",
    "sarl-tracking-spool/000001.jsonl",
]  # fmt: skip
SHARED = {
    "actor/fsdp_config.json",
    "actor/huggingface/config.json",
    "actor/huggingface/tokenizer.json",
    "actor/huggingface/model.safetensors.index.json",
    "data.pt",
    "sarl-tracking-spool/000001.jsonl",
}


def _ranks(share: frozenset[str]) -> set[int]:
    return {int(p.rsplit("_", 1)[1].removesuffix(".pt")) for p in share if "_rank_" in p}


@pytest.mark.parametrize(("position", "ranks"), [(0, {0, 1}), (1, {2, 3})])
def test_a_node_downloads_its_ranks_shards_and_no_hf_weights(
    position: int, ranks: set[int]
) -> None:
    share = verl_share(VERL_FILES, position=position, nnodes=2)
    assert _ranks(share) == ranks
    assert share - {p for p in share if "_rank_" in p} == SHARED
    assert not any(p.endswith(".safetensors") for p in share)
    assert len([p for p in share if "_rank_" in p]) == 2 * 3 * 2  # actor+critic, 3 kinds, 2 ranks


def test_without_a_known_order_every_rank_is_downloaded() -> None:
    share = verl_share(VERL_FILES, position=None, nnodes=2)
    assert _ranks(share) == {0, 1, 2, 3}
    assert not any(p.endswith(".safetensors") for p in share)


@pytest.mark.parametrize(
    ("addresses", "order"),
    [
        (["10.0.0.7", "10.0.0.5"], [1, 0]),
        # verl sorts the address strings: "10.0.0.10" < "10.0.0.9".
        (["10.0.0.9", "10.0.0.10", "10.0.1.1"], [1, 0, 2]),
        (["127.0.0.1", "127.0.0.1"], None),
    ],
)
def test_node_order_is_verls(addresses: list[str], order: list[int] | None) -> None:
    assert verl_node_order(addresses) == order


def test_restore_share_downloads_only_the_share_and_writes_the_tracker(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for path in VERL_FILES:
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes(path.encode())
    store = open_store(str(tmp_path / "store"))
    info = store.save(20, src, {"backend": "verl"})
    settings = StoreSettings(uri=str(tmp_path / "store"), endpoint_url=None, keep_last=3)
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_20" / "actor").mkdir(parents=True)  # a stale copy of the last run
    (ckpt / "global_step_20" / "actor" / "model_world_size_4_rank_0.pt").write_bytes(b"stale")
    share = verl_share(VERL_FILES, position=1, nnodes=2)
    assert restore_verl_share(settings, ckpt, info, share) == 20
    got = {
        str(p.relative_to(ckpt / "global_step_20"))
        for p in (ckpt / "global_step_20").rglob("*")
        if p.is_file()
    }
    assert got == set(share)
    assert (ckpt / VERL_TRACKER).read_text() == "20"


def test_restore_share_without_a_checkpoint_removes_the_tracker(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / VERL_TRACKER).write_text("7")
    settings = StoreSettings(uri=None, endpoint_url=None, keep_last=3)
    assert restore_verl_share(settings, ckpt, None, frozenset()) is None
    assert not (ckpt / VERL_TRACKER).exists()


@pytest.mark.parametrize(
    ("share_bytes", "expected_s"), [(0, 300.0), (25_000_000_000, 1300.0), (50 * 10**9, 2300.0)]
)
def test_the_head_waits_for_downloads_in_proportion_to_the_largest_share(
    share_bytes: int, expected_s: float
) -> None:
    assert download_wait_s(share_bytes) == pytest.approx(expected_s)
