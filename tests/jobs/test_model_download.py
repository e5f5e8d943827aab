"""The trainers and the evaluation load a policy from the object store or a PVC, not the Hub.

``s3://`` policies are downloaded from a real S3 server (moto's, tests/conftest.py) into the
job's work directory by the verl and TRL trainers and by the evaluation (once: the second call
reads the local copy); the verl dry-run plan names the local copy as ``model.path`` (and the
bare Hub id for ``hf://``), on the head and, for workers, downloads nothing in the plan. No GPU:
the trainers' model-path step is called, not training.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("minio")  # sarl.storage's S3 client (the [local] extra)
pytest.importorskip("sarl_operator")  # the builders (not in the verl environment)

from minio import Minio

from sarl.evaluation.checkpoint import resolve_model
from sarl.spec.experiment import Experiment
from sarl.spec.model_source import MODEL_MANIFEST, parse_model_uri
from sarl.storage.models import S3ModelStore
from sarl_jobs import trl_trainer, verl_trainer
from sarl_operator import builders
from sarl_operator.platform_settings import Platform
from tests.jobs.pytorchjob_emulator import replica_envs

FILES = {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": b"\x01" * 4096}


def _experiment(model: str, backend: str = "verl", **storage: str) -> Experiment:
    return Experiment.model_validate(
        {
            "metadata": {"name": "offline", "namespace": "team-a"},
            "spec": {
                "preset": "paper-grpo-math",
                "model": {"name": model},
                "resources": {"nodes": 1, "gpus_per_node": 8, "backend": backend},
                "storage": storage,
            },
        }
    )


@pytest.fixture
def stored_model(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    """``(uri, endpoint)`` of a model copied into a fresh bucket as ``sarl models copy`` does."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    Minio(s3_endpoint.removeprefix("http://"), "testing", "testing", secure=False).make_bucket(
        bucket
    )
    src = tmp_path / "src"
    src.mkdir()
    for name, data in FILES.items():
        (src / name).write_bytes(data)
    uri = f"s3://{bucket}/qwen/Qwen3-4B"
    S3ModelStore(parse_model_uri(uri, "f"), endpoint_url=s3_endpoint).upload(src, "test")
    return uri, s3_endpoint


def _head_plan(exp: Experiment, workdir: str) -> list[str]:
    platform = Platform(s3_endpoint_url="http://minio:9000", s3_credentials_secret="s3")
    job = builders.pytorchjob(
        exp, "team-a", image="img", mlflow_run_id="run", tracking_uri="http://mlflow",
        platform=platform,
    )  # fmt: skip
    secrets = {"s3": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}}
    (head,) = replica_envs(job, secrets=secrets)
    overrides: list[str] = verl_trainer.plan(exp, head.env, workdir=workdir)["verl_overrides"]
    return overrides


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("s3://models/qwen/Qwen3-4B", "/tmp/w/models/models/qwen/Qwen3-4B"),
        ("pvc://model-cache/qwen/Qwen3-4B", "/mnt/sarl-models/model-cache/qwen/Qwen3-4B"),
        ("hf://Qwen/Qwen3-4B", "Qwen/Qwen3-4B"),
        ("Qwen/Qwen3-4B", "Qwen/Qwen3-4B"),
    ],
)
def test_verl_plan_loads_the_local_copy(model: str, path: str) -> None:
    overrides = _head_plan(_experiment(model), "/tmp/w")
    assert f"actor_rollout_ref.model.path='{path}'" in overrides  # hydra-quoted strings
    assert not any("s3://models" in o or "pvc://" in o or "hf://" in o for o in overrides)


@pytest.mark.parametrize("backend", ["verl", "trl"])
def test_trainers_download_the_policy_once(
    stored_model: tuple[str, str], tmp_path: Path, backend: str
) -> None:
    uri, endpoint = stored_model
    exp = _experiment(uri, backend, endpoint_url=endpoint)
    module = verl_trainer if backend == "verl" else trl_trainer
    root = tmp_path / "work"
    path = Path(module._model_path(exp, root))
    assert path == parse_model_uri(uri, "f").local_dir(root)
    assert (path / "config.json").read_bytes() == FILES["config.json"]
    assert (path / MODEL_MANIFEST).is_file()
    before = (path / "model.safetensors").stat().st_mtime_ns
    assert Path(module._model_path(exp, root)) == path  # the second pod start reuses the copy
    assert (path / "model.safetensors").stat().st_mtime_ns == before


def test_evaluation_of_the_base_model_downloads_it(
    stored_model: tuple[str, str], tmp_path: Path
) -> None:
    uri, endpoint = stored_model
    exp = _experiment(uri, endpoint_url=endpoint)
    source = resolve_model(exp, None, tmp_path / "eval")
    assert Path(source.path).is_dir() and source.origin == uri
    assert (Path(source.path) / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    hub = resolve_model(_experiment("hf://Qwen/Qwen3-4B"), None, tmp_path / "eval")
    assert hub.path == "Qwen/Qwen3-4B"


def test_an_incomplete_copy_stops_the_job_with_the_fix(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    Minio(s3_endpoint.removeprefix("http://"), "testing", "testing", secure=False).make_bucket(
        bucket
    )
    exp = _experiment(f"s3://{bucket}/half", endpoint_url=s3_endpoint)
    from sarl.storage import StorageError

    with pytest.raises(StorageError, match="not completely copied.*sarl models copy"):
        verl_trainer._model_path(exp, tmp_path)
