"""The evaluation job end to end on CPU: benchmark parquet from ``sarl data prepare``, a tiny
Qwen3 checkpoint in a store, HF generation, math-verify scoring, a real MLflow server."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from sarl.datasets.prepare import prepare
from sarl.datasets.sources import get_source
from sarl.evaluation.passk import summarize
from sarl.tracking.metrics import eval_avg_at, eval_pass_at
from tests.sarl.datasets.fixtures import MATH500_ROWS, make_bucket, s3_env, write_jsonl

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("math_verify")
pytest.importorskip("mlflow")

from mlflow import MlflowClient

from sarl_jobs import evaluate


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised tiny Qwen3 and its tokenizer, saved as a HF model directory."""
    from sarl.runner.tiny import build_tiny_qwen, train_tokenizer
    from sarl.spec.experiment import TinyModel

    path = tmp_path_factory.mktemp("tiny-model")
    texts = [r["problem"] + " " + r["answer"] for r in MATH500_ROWS] * 20
    tokenizer = train_tokenizer(texts, 300)
    cfg = TinyModel(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                    intermediate_size=32, vocab_size=300)  # fmt: skip
    build_tiny_qwen(tokenizer, cfg, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _config(tmp_path: Path, *, model: str, k: int, endpoint: str | None = None) -> Path:
    name = f"eval-{uuid.uuid4().hex[:8]}"
    doc = {
        "metadata": {"name": name},
        "spec": {
            "model": {"name": model},
            "algorithm": {"max_response_length": 8},
            "evaluation": {"benchmarks": ["math500"], "k": k, "temperature": 1.0},
            "storage": {"endpoint_url": endpoint},
        },
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _artifact(client: MlflowClient, run_id: str, path: str, dst: Path) -> Path:
    return Path(client.download_artifacts(run_id, path, str(dst)))


def test_checkpoint_from_s3_store_scored_and_logged(
    tmp_path: Path,
    tiny_model: Path,
    s3_endpoint: str,
    mlflow_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sarl.storage import open_store

    s3_env(monkeypatch, s3_endpoint)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    bucket = make_bucket(s3_endpoint)
    source = write_jsonl(tmp_path / "math500.jsonl", MATH500_ROWS)
    prepare(get_source("math500"), source, f"s3://{bucket}/data", endpoint_url=s3_endpoint)
    # A verl checkpoint: FSDP shards plus the HF model under actor/huggingface (hf_model saved).
    ckpt = tmp_path / "global_step_7"
    (ckpt / "actor").mkdir(parents=True)
    (ckpt / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"shard")
    shutil.copytree(tiny_model, ckpt / "actor" / "huggingface")
    open_store(f"s3://{bucket}/ckpt", endpoint_url=s3_endpoint).save(7, ckpt, {})

    config = _config(tmp_path, model="builtin:tiny-qwen", k=2, endpoint=s3_endpoint)
    stats = evaluate.main(
        config, checkpoint=f"s3://{bucket}/ckpt", data_uri=f"s3://{bucket}/data",
        workdir=tmp_path / "work", progress=False,
    )  # fmt: skip

    client = MlflowClient(mlflow_server.url)
    name = yaml.safe_load(config.read_text())["metadata"]["name"]
    experiment = client.get_experiment_by_name(name)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == f"{name}-eval" and run.info.status == "FINISHED"
    assert run.data.tags["sarl.eval.model"] == f"s3://{bucket}/ckpt/step-00000007"
    history = client.get_metric_history(run.info.run_id, eval_avg_at("math500", 2))
    assert [m.step for m in history] == [7]
    results_path = _artifact(client, run.info.run_id, "eval/step-00000007/results.jsonl", tmp_path)
    results = [json.loads(line) for line in results_path.read_text().splitlines()]
    assert [r["ground_truth"] for r in results] == [r["answer"] for r in MATH500_ROWS]
    assert all(len(r["responses"]) == len(r["correct"]) == 2 for r in results)
    expected = summarize([r["correct"] for r in results], 2)
    logged = run.data.metrics
    assert logged[eval_avg_at("math500", 2)] == pytest.approx(expected["avg@k"])
    assert logged[eval_pass_at("math500", 2)] == pytest.approx(expected["pass@k"])
    assert stats["math500"]["avg@k"] == pytest.approx(expected["avg@k"])
    png = _artifact(client, run.info.run_id, "eval/step-00000007/scores.png", tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class Scripted:
    """A generator with fixed responses per problem (to check the numbers, not the model)."""

    def __init__(self, responses: dict[str, list[str]]) -> None:
        self.responses = responses

    def render(self, messages: list[dict[str, str]]) -> str:
        return messages[0]["content"]

    def __call__(
        self, prompts: Sequence[str], *, k: int, max_new_tokens: int, temperature: float
    ) -> list[list[str]]:
        return [self.responses[next(q for q in self.responses if q in p)][:k] for p in prompts]


def test_known_verdicts_logged_into_the_training_run(
    tmp_path: Path, mlflow_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(get_source("math500"), write_jsonl(tmp_path / "m.jsonl", MATH500_ROWS), str(tmp_path))
    client = MlflowClient(mlflow_server.url)
    experiment_id = client.create_experiment(f"train-{uuid.uuid4().hex[:8]}")
    training = client.create_run(experiment_id, run_name="training")
    client.set_terminated(training.info.run_id, "FAILED")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("MLFLOW_RUN_ID", training.info.run_id)
    q1, q2, q3 = (r["problem"] for r in MATH500_ROWS)  # answers 3/4, 6, 1/2
    generator = Scripted({
        q1: ["so \\boxed{0.75}", "\\boxed{3/5}"],  # math-verify: 0.75 = \frac{3}{4}
        q2: ["\\boxed{7}", "no answer"],
        q3: ["\\boxed{\\frac12}", "\\boxed{0.5}"],
    })  # fmt: skip
    stats = evaluate.main(
        _config(tmp_path, model="unused", k=2), data_uri=str(tmp_path), generator=generator,
        workdir=tmp_path / "work",
    )  # fmt: skip
    # avg@2 = mean(1/2, 0, 1); pass@2 = mean(1, 0, 1)
    assert stats["math500"]["avg@k"] == pytest.approx(0.5)
    assert stats["math500"]["pass@k"] == pytest.approx(2 / 3)
    assert stats["math500"]["answer_rate"] == pytest.approx(5 / 6)
    run = client.get_run(training.info.run_id)
    assert run.info.status == "FAILED"  # the training run's outcome is left as it was
    assert run.data.metrics[eval_pass_at("math500", 2)] == pytest.approx(2 / 3)


def test_missing_data_is_named_before_any_model_loads(tmp_path: Path) -> None:
    config = _config(tmp_path, model="/nonexistent-model", k=2)
    with pytest.raises(ValueError, match="benchmark 'math500': no data location; set SARL_DATA"):
        evaluate.main(config, workdir=tmp_path)
    assert evaluate._cli(["--config", str(config), "--data-uri", str(tmp_path)]) == 2


def test_verl_checkpoint_without_hf_weights_is_explained(tmp_path: Path) -> None:
    from sarl.evaluation.checkpoint import hf_model_dir

    hf = tmp_path / "actor" / "huggingface"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="'hf_model' in actor.checkpoint.save_contents"):
        hf_model_dir(tmp_path, "ckpt")


@pytest.mark.gpu
def test_vllm_generates_k_samples(tiny_model: Path) -> None:
    pytest.importorskip("vllm")  # not on a GPU machine without it (tests/gpu/check.py)
    from sarl.evaluation.generation import VLLMGenerator

    generator = VLLMGenerator(str(tiny_model), dtype="float32")
    out = generator(["1 + 1 ="] * 2, k=3, max_new_tokens=4, temperature=1.0)
    assert [len(group) for group in out] == [3, 3]


def test_metric_names_and_the_mean_over_benchmarks() -> None:
    from sarl.evaluation.benchmark import benchmark_metrics

    stats = {
        "math500": {"avg@k": 0.5, "pass@k": 0.75, "answer_rate": 1.0},
        "aime25": {"avg@k": 0.1, "pass@k": 0.25, "answer_rate": 0.5},
    }
    assert benchmark_metrics(stats, 8) == {
        "eval/math500/avg_at_8": 0.5,
        "eval/math500/pass_at_8": 0.75,
        "eval/math500/answer_rate": 1.0,
        "eval/aime25/avg_at_8": 0.1,
        "eval/aime25/pass_at_8": 0.25,
        "eval/aime25/answer_rate": 0.5,
        "eval/mean/avg_at_8": pytest.approx(0.3),
        "eval/mean/pass_at_8": pytest.approx(0.5),
    }
