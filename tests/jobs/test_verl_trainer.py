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
