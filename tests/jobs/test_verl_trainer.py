"""The verl job on one node: prompts written as parquet, verl's config composed and handed to
verl's ``main_ppo.main`` (replaced here; the real run is the GPU smoke test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("verl")


def test_single_node_main_hands_the_composed_config_to_verl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pandas as pd
    from verl.trainer import main_ppo

    from sarl_jobs import verl_trainer

    seen: list[Any] = []
    monkeypatch.setattr(main_ppo, "main", seen.append)
    monkeypatch.setattr(verl_trainer, "_model_path", lambda exp, root: "/models/tiny")
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "exp.yaml"
    spec = {"preset": "local-grpo-arithmetic", "resources": {"gpus_per_node": 1}}
    cfg.write_text(yaml.safe_dump({"metadata": {"name": "one-node"}, "spec": spec}))

    verl_trainer.main(cfg, workdir=tmp_path / "work")

    (config,) = seen
    assert config.actor_rollout_ref.model.path == "/models/tiny"
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (1, 1)
    train = pd.read_parquet(config.data.train_files)
    from sarl.spec.presets import preset

    local = preset("local-grpo-arithmetic")
    assert len(train) == local["data"]["train_size"]
    assert list(train["prompt"][0][0]) == ["role", "content"]
    assert len(pd.read_parquet(config.data.val_files)) == local["evaluation"]["max_problems"]


def test_the_driver_sends_what_verls_file_logger_writes_to_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_server: Any
) -> None:
    """With a tracking URI verl logs to a file (not to MLflow), and the driver's tracker sends
    every step of it to a new run, which it finishes when verl returns."""
    import mlflow
    from verl.trainer import main_ppo
    from verl.utils.tracking import Tracking

    from sarl_jobs import verl_trainer

    seen: list[Any] = []

    def verl_main(config: Any) -> None:  # verl's TaskRunner, logging as its trainer does
        seen.append(config)
        env = config.ray_kwargs.ray_init.runtime_env.env_vars
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", env.VERL_FILE_LOGGER_PATH)
        logger = Tracking(
            config.trainer.project_name,
            config.trainer.experiment_name,
            default_backend=list(config.trainer.logger),
        )
        for step in (1, 2):
            logger.log({"actor/loss": 1.0 / step, "val-core/arith/acc/mean@1": 0.5}, step=step)
        logger.finish()

    monkeypatch.setattr(main_ppo, "main", verl_main)
    monkeypatch.setattr(verl_trainer, "_model_path", lambda exp, root: "/models/tiny")
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    cfg = tmp_path / "exp.yaml"
    spec = {"preset": "local-grpo-arithmetic", "resources": {"gpus_per_node": 1}}
    cfg.write_text(yaml.safe_dump({"metadata": {"name": "tracked-verl"}, "spec": spec}))

    verl_trainer.main(cfg, workdir=tmp_path / "work")

    (config,) = seen
    assert list(config.trainer.logger) == ["console", "file"]
    assert config.sarl.tracking.metrics_file == str(tmp_path / "work/tracking/metrics.jsonl")
    client = mlflow.MlflowClient(mlflow_server.url)
    experiment = client.get_experiment_by_name("tracked-verl")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["sarl.backend"] == "verl"
    history = client.get_metric_history(run.info.run_id, "val-core/arith/acc/mean_at_1")
    assert sorted(m.step for m in history) == [1, 2]
    losses = client.get_metric_history(run.info.run_id, "actor/loss")
    assert {m.step: m.value for m in losses} == {1: 1.0, 2: 0.5}
