"""End-to-end local runs on CPU: a tiny policy really trains with TRL, metrics and artifacts land
in MLflow, checkpoints land in the store, ``--resume`` continues the same run.

Real parts only: TRL's GRPO trainer on a real (tiny, randomly initialised and warm-started)
Qwen3 model, the real MLflow client with a SQLite store or the real MLflow server subprocess,
the local checkpoint store or a real S3-compatible server (moto) through the minio client.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from sarl.runner.local import LocalOptions, RunResult, run_local
from sarl.spec import load_experiment
from sarl.storage import open_store

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow


def tiny_experiment(name: str, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 40}},
        "data": {"train_size": 16, "eval_size": 4, "difficulty": 2},
        "algorithm": {
            "rollouts_per_prompt": 2,
            "train_batch_size": 2,
            "mini_batch_size": 2,
            "max_response_length": 48,
            "max_steps": 4,
            "learning_rate": 1e-3,
        },
        "evaluation": {"k": 2, "every_n_steps": 2, "max_problems": 4},
        "tracking": {"log_maps_every_n_steps": 2},
        "storage": {"every_n_steps": 2},
        "reward": [
            {"name": "ground_truth", "weight": 1.0},
            {
                "name": "structure",
                "weight": 1.0,
                "settings": {"embedder": {"kind": "local"}, "workers": 1},
            },
        ],
    }
    for key, value in overrides.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return {"metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def first_run(workdir: Path) -> tuple[RunResult, str, Path]:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    ckpt = workdir / "ckpt" / name
    exp = load_experiment(tiny_experiment(name, storage={"checkpoint_uri": str(ckpt)}))
    result = run_local(exp, LocalOptions(workdir=workdir, tracking_uri=uri, progress=False))
    return result, uri, ckpt


def test_run_logs_metrics_params_spec_and_maps(first_run: tuple[RunResult, str, Path]) -> None:
    result, uri, _ = first_run
    client = mlflow.MlflowClient(uri)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm.name"] == "grpo"
    assert run.data.params["reward.0.name"] == "ground_truth"
    for metric in (
        "reward/mean",
        "reward/structure",
        "reward/ground_truth",
        "accuracy",
        "structure/clustering",
        "response_length",
        "entropy",
    ):
        steps = [m.step for m in client.get_metric_history(result.run_id, metric)]
        assert steps == [1, 2, 3, 4], metric
    assert [m.step for m in client.get_metric_history(result.run_id, "kl")]
    evals = client.get_metric_history(result.run_id, "eval/heldout/pass_at_2")
    # before any update, every 2 steps; the final evaluation reuses the one at the last step
    assert [m.step for m in evals] == [0, 2, 4]
    for metric in ("answer_rate", "frac_reward_zero_std", "structure/degenerate"):
        assert len(client.get_metric_history(result.run_id, metric)) == 4, metric
    artifacts = {a.path for a in client.list_artifacts(result.run_id)}
    assert {"spec", "maps"} <= artifacts
    maps = client.list_artifacts(result.run_id, "maps/step-000002")
    assert maps and all(a.path.endswith(".png") for a in maps)
    # Maps of the policy before any RL update too, each saying what it is of.
    first = client.list_artifacts(result.run_id, "maps/step-000000")
    assert [a.path.rsplit("/", 1)[-1] for a in first] == [f"sample-{i}.png" for i in range(3)]
    png = Image.open(client.download_artifacts(result.run_id, first[0].path))
    title, caption = png.text["Title"], png.text["Description"]
    assert title.startswith(f"{result.name} · step 0 (before RL) · sample 1 of 3\n")
    assert "correct" in title and caption.startswith("prompt: ")
    assert "\nresponse: " in caption
    assert run.data.tags["mlflow.note.content"].startswith(f"Experiment {result.name!r}: GRPO")
    spec_text = Path(client.download_artifacts(result.run_id, "spec/experiment.yaml")).read_text()
    assert "local-grpo-arithmetic" in spec_text


def test_run_checkpoints_and_changes_the_weights(
    first_run: tuple[RunResult, str, Path], tmp_path: Path, workdir: Path
) -> None:
    from safetensors.torch import load_file

    result, _, ckpt = first_run
    store = open_store(str(ckpt))
    assert [c.step for c in store.list()] == [2, 4]
    latest = store.latest()
    assert latest is not None and latest.metadata["mlflow_run_id"] == result.run_id
    trained = load_file(store.download(latest, tmp_path / "ckpt") / "model.safetensors")
    (policy,) = (workdir / "cache").glob("tiny-*")
    initial = load_file(policy / "model.safetensors")
    changed = [k for k in initial if not (initial[k] == trained[k]).all()]
    assert changed, "no weight changed during RL"


def test_resume_continues_the_same_run_from_the_last_checkpoint(
    first_run: tuple[RunResult, str, Path], workdir: Path
) -> None:
    result, uri, ckpt = first_run
    name = result.checkpoint_uri.rstrip("/").rpartition("/")[2]
    longer = tiny_experiment(name, storage={"checkpoint_uri": str(ckpt)})
    longer["spec"]["algorithm"]["max_steps"] = 6
    again = run_local(
        load_experiment(longer),
        LocalOptions(workdir=workdir, tracking_uri=uri, resume=True, progress=False),
    )
    assert again.resumed_from == 4
    assert again.run_id == result.run_id
    assert again.steps == 6
    history = mlflow.MlflowClient(uri).get_metric_history(result.run_id, "reward/mean")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5, 6]


def test_run_against_mlflow_server_and_s3(
    workdir: Path, mlflow_server: Any, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from minio import Minio

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "sarl-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sarl-test-secret")
    bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
    Minio(
        s3_endpoint.removeprefix("http://"),
        access_key="sarl-test",
        secret_key="sarl-test-secret",
        secure=False,
    ).make_bucket(bucket)
    name = f"s3-{uuid.uuid4().hex[:6]}"
    exp = load_experiment(
        tiny_experiment(
            name,
            algorithm={"max_steps": 2},
            storage={"checkpoint_uri": f"s3://{bucket}/runs/{name}", "endpoint_url": s3_endpoint},
        )
    )
    result = run_local(
        exp, LocalOptions(workdir=workdir, tracking_uri=mlflow_server.url, progress=False)
    )
    assert result.run_url and result.run_url.startswith(mlflow_server.url)
    run = mlflow.MlflowClient(mlflow_server.url).get_run(result.run_id)
    assert run.info.status == "FINISHED" and "reward/mean" in run.data.metrics
    store = open_store(f"s3://{bucket}/runs/{name}", endpoint_url=s3_endpoint)
    latest = store.latest()
    assert latest is not None and latest.step == 2
    assert any(f.path == "model.safetensors" for f in latest.files)


def test_python_client_runs_an_experiment_object(workdir: Path) -> None:
    import sarl
    from sarl.spec import Experiment

    exp = Experiment.model_validate(
        tiny_experiment(f"nb-{uuid.uuid4().hex[:6]}", algorithm={"max_steps": 1})
    )
    uri = f"sqlite:///{workdir / 'client.db'}"
    result = sarl.Client.local(workdir=workdir, tracking_uri=uri, progress=False).run(exp)
    assert result.steps == 1
    assert mlflow.MlflowClient(uri).get_run(result.run_id).info.status == "FINISHED"


def test_rloo_on_countdown_with_a_local_model_directory(
    first_run: tuple[RunResult, str, Path], workdir: Path
) -> None:
    """Any saved Hugging Face model directory is accepted as the policy (here: the cached
    warm-started tiny model), and RLOO runs through TRL's RLOOTrainer."""
    (policy,) = (workdir / "cache").glob("tiny-*")
    doc = tiny_experiment(
        f"rloo-{uuid.uuid4().hex[:6]}", algorithm={"name": "rloo", "max_steps": 2}
    )
    doc["spec"]["model"] = {"name": str(policy)}
    doc["spec"]["data"]["task"] = "countdown"
    uri = f"sqlite:///{workdir / 'rloo.db'}"
    result = run_local(
        load_experiment(doc), LocalOptions(workdir=workdir, tracking_uri=uri, progress=False)
    )
    run = mlflow.MlflowClient(uri).get_run(result.run_id)
    assert result.steps == 2
    assert run.data.params["algorithm.name"] == "rloo"
    assert "reward/mean" in run.data.metrics
