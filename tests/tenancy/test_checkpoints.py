"""Checkpoints that cannot run code: team-b's planted or changed checkpoints in team-a's
checkpoint prefix are refused when team-a's job resumes, and nothing of them runs.

Team-b here can write team-a's prefix (the store's prefix policy, tests/tenancy/test_store.py,
is the first wall; this is the second: a misconfigured external bucket, a shared directory).
Each tenant's job has its own ``SARL_CHECKPOINT_KEY`` (what the operator gives its pods from the
Secret ``sarl-tenant``). Real parts: both checkpoint stores (a directory and moto's S3 server
over HTTP), the cluster job's resume (:func:`sarl_jobs.resume.restore_trl`), and a real
transformers ``Trainer`` that trains a tiny Qwen3 one step, checkpoints it and resumes from it.
The planted files are pickles whose ``__reduce__`` would create a marker directory: the marker
appearing would mean team-b's code ran in team-a's trainer.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("minio")

from minio import Minio  # noqa: E402

from sarl.storage import CheckpointRefused, open_store  # noqa: E402
from sarl.storage.base import encode_manifest  # noqa: E402
from sarl.storage.signing import KEY_ENV  # noqa: E402
from sarl_jobs.resume import StoreSettings, restore_trl  # noqa: E402

KEYS = {"team-a": "team-a-checkpoint-key-4f1c2a9e", "team-b": "team-b-checkpoint-key-77d0b3e1"}
PREFIX = "checkpoints/team-a/exp-1"  # team-a's prefix (sarl.cluster.tenancy.store_prefixes)
ACCESS, SECRET = "tenancy-test-key", "tenancy-test-secret"


class Plant:
    """Unpickling this creates ``path``: code team-b wants run in team-a's trainer."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


def _model(seed: int) -> Any:
    config = transformers.Qwen3Config(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=32,
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(config)


def _trainer(model: Any, out: Path) -> Any:
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=1, save_steps=1, per_device_train_batch_size=2,
        report_to=[], use_cpu=True, disable_tqdm=True, save_only_model=False,
    )  # fmt: skip
    rows = [{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]} for _ in range(4)]
    return transformers.Trainer(model=model, args=args, train_dataset=rows)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Team-a's trainer checkpoint after one step (safetensors weights, optimizer.pt,
    scheduler.pt, rng_state.pth, trainer_state.json) and its weights."""
    out = tmp_path_factory.mktemp("team-a-trainer")
    trainer = _trainer(_model(seed=0), out)
    trainer.train()
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return out / "checkpoint-1", weights


@pytest.fixture(params=["local", "s3"])
def uri(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Team-a's checkpoint URI on a directory store or the moto S3 server."""
    if request.param == "local":
        yield str(tmp_path / "bucket" / PREFIX)
        return
    endpoint: str = request.getfixturevalue("s3_endpoint")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    bucket = f"sarl-{uuid.uuid4().hex[:12]}"
    Minio(endpoint.removeprefix("http://"), ACCESS, SECRET, secure=False).make_bucket(bucket)
    yield f"s3://{bucket}/{PREFIX}"


def as_tenant(monkeypatch: pytest.MonkeyPatch, tenant: str | None) -> None:
    """The environment of ``tenant``'s pod (None: no key, an install without tenancy)."""
    if tenant is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, KEYS[tenant])


def _copy(checkpoint: Path, dest: Path) -> Path:
    shutil.copytree(checkpoint, dest)
    return dest


def _poison(directory: Path, name: str, marker: Path, *, pad: bool = True) -> None:
    """Replace ``name`` with a pickle that would run code; ``pad``: to the same size, so only
    its hash tells it apart (the store's completeness check compares sizes)."""
    target = directory / name
    size = target.stat().st_size
    torch.save({"state": Plant(marker)}, target)
    if pad:
        with target.open("ab") as f:
            f.write(b"\0" * max(size - target.stat().st_size, 0))


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "team-b-code-ran"


def _resume(uri: str, out: Path) -> Path | None:
    """Team-a's restarted job: :func:`restore_trl` as ``sarl_jobs.trl_trainer`` calls it."""
    return restore_trl(StoreSettings(uri=uri, endpoint_url=None, keep_last=3), out)


@pytest.mark.parametrize("planter_key", ["team-b", None])
def test_a_checkpoint_team_b_plants_in_team_as_prefix_is_refused_and_runs_nothing(
    trained: tuple[Path, dict[str, Any]],
    uri: str,
    tmp_path: Path,
    marker: Path,
    monkeypatch: pytest.MonkeyPatch,
    planter_key: str | None,
) -> None:
    """Attack (issue 36 item 2): team-b writes a newer checkpoint into team-a's prefix, signed
    with its own key or not signed, whose rng_state.pth and optimizer.pt run code when
    unpickled. Must: team-a's resume refuses it naming the checkpoint, fails the job (no
    silent start from scratch), and no file of it reaches team-a's disk or runs."""
    checkpoint, _ = trained
    as_tenant(monkeypatch, "team-a")
    open_store(uri).save(1, checkpoint, {"mlflow_run_id": "team-a-run"})
    planted = _copy(checkpoint, tmp_path / "planted")
    _poison(planted, "rng_state.pth", marker)
    _poison(planted, "optimizer.pt", marker)
    as_tenant(monkeypatch, planter_key)
    open_store(uri).save(2, planted, {"mlflow_run_id": "team-b-run"})

    as_tenant(monkeypatch, "team-a")
    with pytest.raises(CheckpointRefused) as refused:
        _resume(uri, tmp_path / "team-a-out")

    message = str(refused.value)
    assert message.startswith(f"checkpoint {open_store(uri).step_uri(2)} is not signed with this")
    assert "refusing to load it" in message
    assert ("another key" if planter_key else "no signature") in message
    assert KEYS["team-a"] not in message and KEYS["team-b"] not in message
    assert not (tmp_path / "team-a-out" / "checkpoint-2").exists()
    assert not marker.exists()


def test_a_changed_file_in_team_as_checkpoint_is_refused(
    trained: tuple[Path, dict[str, Any]],
    uri: str,
    tmp_path: Path,
    marker: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attack: team-b overwrites team-a's signed checkpoint's optimizer.pt with a pickle that
    runs code, same size, manifest untouched. Must: refused at download by its sha256, before
    the checkpoint directory exists; nothing runs."""
    checkpoint, _ = trained
    as_tenant(monkeypatch, "team-a")
    store = open_store(uri)
    store.save(1, checkpoint, {})
    poisoned = _copy(checkpoint, tmp_path / "poisoned")
    _poison(poisoned, "optimizer.pt", marker)
    _overwrite(uri, 1, "optimizer.pt", (poisoned / "optimizer.pt").read_bytes())

    with pytest.raises(CheckpointRefused, match="checksum mismatch .*optimizer.pt.* refusing"):
        _resume(uri, tmp_path / "team-a-out")
    assert not (tmp_path / "team-a-out" / "checkpoint-1").exists()
    assert not marker.exists()


def test_a_changed_manifest_in_team_as_checkpoint_is_refused(
    trained: tuple[Path, dict[str, Any]],
    uri: str,
    tmp_path: Path,
    marker: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attack: team-b replaces a file of team-a's signed checkpoint and rewrites the manifest's
    hash and size to match, keeping team-a's signature. Must: the signature no longer matches;
    refused before any file is fetched; nothing runs."""
    checkpoint, _ = trained
    as_tenant(monkeypatch, "team-a")
    open_store(uri).save(1, checkpoint, {})
    poisoned = _copy(checkpoint, tmp_path / "poisoned")
    _poison(poisoned, "rng_state.pth", marker)
    forged = open_store(uri).latest()
    assert forged is not None and forged.signature is not None
    # team-b saves with team-a's old signature pasted into its manifest
    as_tenant(monkeypatch, None)
    store = open_store(uri)
    info = store.save(1, poisoned, {})
    _overwrite_manifest(
        uri, 1, encode_manifest(dataclasses.replace(info, signature=forged.signature))
    )

    as_tenant(monkeypatch, "team-a")
    with pytest.raises(CheckpointRefused, match="changed after signing"):
        _resume(uri, tmp_path / "team-a-out")
    assert not marker.exists()


def test_team_as_genuine_signed_checkpoint_resumes_its_trainer(
    trained: tuple[Path, dict[str, Any]],
    uri: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Team-a's own checkpoint, signed by its job, resumes: the Trainer (which loads optimizer,
    scheduler and RNG with ``weights_only=True``, weights from safetensors) gets the weights."""
    checkpoint, weights = trained
    as_tenant(monkeypatch, "team-a")
    open_store(uri).save(1, checkpoint, {})
    resume_from = _resume(uri, tmp_path / "team-a-out")
    assert resume_from == tmp_path / "team-a-out" / "checkpoint-1"

    trainer = _trainer(_model(seed=1), tmp_path / "resumed")
    trainer.train(resume_from_checkpoint=str(resume_from))
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, weights[name]), name


def test_without_keys_a_planted_pickle_still_runs_nothing_in_the_trainer(
    trained: tuple[Path, dict[str, Any]], tmp_path: Path, marker: Path
) -> None:
    """An install without tenancy (no keys, nothing signed): the second wall. transformers
    5.24.0 loads optimizer.pt with ``torch.load(weights_only=True)`` (``trainer.py``,
    ``_load_optimizer_and_scheduler``), so the planted pickle is refused as it is read."""
    planted = _copy(trained[0], tmp_path / "planted")
    _poison(planted, "optimizer.pt", marker, pad=False)
    trainer = _trainer(_model(seed=1), tmp_path / "resumed")
    with pytest.raises(Exception, match="Weights only load failed"):
        trainer.train(resume_from_checkpoint=str(planted))
    assert not marker.exists()


def _overwrite(uri: str, step: int, rel: str, data: bytes) -> None:
    """Write ``files/<rel>`` of ``step`` behind the store's back, as team-b would."""
    _raw_put(uri, f"step-{step:08d}/files/{rel}", data)


def _overwrite_manifest(uri: str, step: int, data: bytes) -> None:
    _raw_put(uri, f"step-{step:08d}/manifest.json", data)


def _raw_put(uri: str, rel: str, data: bytes) -> None:
    if not uri.startswith("s3://"):
        (Path(uri) / rel).write_bytes(data)
        return
    import io

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    endpoint = os.environ["AWS_ENDPOINT_URL"].removeprefix("http://")
    client = Minio(endpoint, ACCESS, SECRET, secure=False)
    client.put_object(bucket, f"{prefix}/{rel}", io.BytesIO(data), len(data))
