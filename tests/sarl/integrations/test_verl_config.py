"""The generated overrides compose against verl 0.9.1's own ``ppo_trainer.yaml`` and land at the
keys verl reads. Skipped without verl (the TRL environment)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest
from pydantic import BaseModel

verl = pytest.importorskip("verl")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from verl.trainer.ppo.core_algos import AdvantageEstimator  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

from sarl.integrations.verl.compute_score import compute_score  # noqa: E402
from sarl.integrations.verl.config import ADV_ESTIMATORS, verl_overrides  # noqa: E402
from sarl.rewards.base import Reward, RewardOutput, Sample  # noqa: E402
from sarl.rewards.registry import register_reward  # noqa: E402
from sarl.spec.experiment import Experiment  # noqa: E402
from sarl.spec.presets import PRESETS  # noqa: E402
from sarl_jobs.checkpoints import StoreCheckpointCallback  # noqa: E402

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def compose_verl(overrides: Sequence[str]) -> DictConfig:
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def experiment(preset: str) -> Experiment:
    return Experiment.model_validate({"metadata": {"name": "job"}, "spec": {"preset": preset}})


def overrides_for(exp: Experiment, **kwargs: str) -> list[str]:
    return verl_overrides(
        exp,
        train_files="/data/train.parquet",
        val_files="/data/val.parquet",
        n_gpus_per_node=8,
        nnodes=2,
        model_path="/models/tiny" if exp.spec.model.is_builtin else None,
        **kwargs,
    )


class _NoSettings(BaseModel):
    pass


class GroupReward(Reward):
    """A reward that needs whole groups (scores are not used here)."""

    name = "jobs_test_group"
    Settings = _NoSettings
    needs_group = True

    @property
    def component_keys(self) -> tuple[str, ...]:
        return ()

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [[RewardOutput(0.0) for _ in g] for g in groups]


def test_estimator_names_are_verl_estimators() -> None:
    assert set(ADV_ESTIMATORS.values()) <= {e.value for e in AdvantageEstimator}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_overrides_compose_and_land_where_verl_reads(preset: str) -> None:
    exp = experiment(preset)
    algo = exp.spec.algorithm
    cfg = compose_verl(overrides_for(exp))

    assert cfg.algorithm.adv_estimator == ADV_ESTIMATORS[algo.name]
    assert need_critic(cfg) == (algo.name == "ppo")
    actor = cfg.actor_rollout_ref.actor
    assert (actor.strategy, cfg.actor_rollout_ref.ref.strategy) == ("fsdp2", "fsdp2")
    assert cfg.actor_rollout_ref.rollout.n == algo.rollouts_per_prompt
    assert actor.kl_loss_coef == algo.kl_coef and actor.use_kl_loss
    assert actor.optim.lr == algo.learning_rate
    assert actor.ppo_mini_batch_size == algo.mini_batch_size
    assert cfg.data.max_response_length == algo.max_response_length
    # verl's rollout reads its lengths through interpolations of data.*
    assert cfg.actor_rollout_ref.rollout.response_length == algo.max_response_length
    assert cfg.actor_rollout_ref.rollout.prompt_length == algo.max_prompt_length
    assert cfg.trainer.total_epochs == algo.epochs
    assert cfg.trainer.total_training_steps == algo.max_steps
    assert list(cfg.trainer.logger) == ["console", "mlflow"]
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 8)
    if algo.name == "ppo":
        assert cfg.critic.strategy == "fsdp2"
        assert cfg.critic.optim.lr == algo.critic_learning_rate
    # Every preset's reward is the per-sample structure reward: verl's custom function path.
    fn = get_custom_reward_fn(cfg)
    assert fn is not None and fn.args[0] is compute_score
    assert fn.args[1]["reward"] == exp.spec.reward[0].name
    if algo.name != "ppo":  # PPO's check loads the critic's model config from the Hub
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=False)


def test_group_reward_goes_to_the_reward_manager() -> None:
    from sarl.integrations.verl.reward_manager import SarlRewardManager

    register_reward(GroupReward)
    exp = Experiment.model_validate(
        {
            "metadata": {"name": "job"},
            "spec": {"preset": "local-grpo-arithmetic", "reward": [{"name": "jobs_test_group"}]},
        }
    )
    cfg = compose_verl(overrides_for(exp))
    assert resolve_reward_manager_cls(cfg) is SarlRewardManager
    assert cfg.actor_rollout_ref.rollout.val_kwargs.n == exp.spec.algorithm.rollouts_per_prompt


def maxflow_experiment(**settings: object) -> Experiment:
    reward = {"name": "tag_maxflow", "settings": {"model": "some/model", **settings}}
    return Experiment.model_validate(
        {
            "metadata": {"name": "job"},
            "spec": {"preset": "local-grpo-arithmetic", "reward": [reward]},
        }
    )


def test_a_truncation_masking_reward_goes_to_the_reward_manager() -> None:
    # Only the manager sees the response tokens that tell a truncated response (A.7).
    from sarl.integrations.verl.reward_manager import SarlRewardManager

    exp = maxflow_experiment(truncated_score=0.0)
    cfg = compose_verl(overrides_for(exp))
    assert resolve_reward_manager_cls(cfg) is SarlRewardManager
    assert cfg.reward.reward_kwargs.sarl.reward == "tag_maxflow"
    assert "group_size" not in cfg.reward.reward_kwargs.sarl  # a per-sample reward
    assert cfg.actor_rollout_ref.rollout.val_kwargs.n == exp.spec.evaluation.k


def test_masking_by_nan_is_refused_on_verl_naming_the_field() -> None:
    # verl has no loss mask for truncated responses and takes finite rewards only.
    with pytest.raises(ValueError, match=r"settings\.truncated_score.*TRL backend"):
        overrides_for(maxflow_experiment())


def test_tracking_and_storage_settings_reach_their_readers(tmp_path: os.PathLike[str]) -> None:
    exp = Experiment.model_validate(
        {
            "metadata": {"name": "job"},
            "spec": {
                "preset": "paper-grpo-math",
                "tracking": {"mlflow_uri": "http://mlflow:5000"},
                "storage": {"checkpoint_uri": str(tmp_path), "keep_last": 2},
            },
        }
    )
    cfg = compose_verl(overrides_for(exp, mlflow_run_id="abc123"))
    env_vars = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env_vars == {"MLFLOW_TRACKING_URI": "http://mlflow:5000", "MLFLOW_RUN_ID": "abc123"}
    assert cfg.trainer.save_freq == exp.spec.storage.every_n_steps
    callback = StoreCheckpointCallback(config=cfg)
    assert (callback.uri, callback.keep_last) == (str(tmp_path), 2)


def test_builtin_model_needs_a_model_path() -> None:
    with pytest.raises(ValueError, match=r"spec\.model\.name"):
        verl_overrides(
            experiment("local-grpo-arithmetic"),
            train_files="t",
            val_files="v",
            n_gpus_per_node=1,
            nnodes=1,
        )


def test_weighted_or_several_rewards_are_refused() -> None:
    exp = Experiment.model_validate(
        {
            "metadata": {"name": "job"},
            "spec": {"preset": "paper-grpo-math", "reward": [{"name": "structure", "weight": 2}]},
        }
    )
    with pytest.raises(ValueError, match=r"spec\.reward"):
        overrides_for(exp)


def test_resume_layout_is_the_one_verl_resumes_from(tmp_path: os.PathLike[str]) -> None:
    """What sarl_jobs.resume restores from the store is found by verl's own resume lookup,
    and the composed config resumes automatically from that directory."""
    pytest.importorskip("minio")
    from pathlib import Path

    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    from sarl.storage import open_store
    from sarl_jobs.resume import StoreSettings, restore_verl

    root = Path(tmp_path)
    (root / "src" / "actor").mkdir(parents=True)
    (root / "src" / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * 8)
    open_store(str(root / "store")).save(12, root / "src", {"backend": "verl"})
    settings = StoreSettings(uri=str(root / "store"), endpoint_url=None, keep_last=2)
    assert restore_verl(settings, root / "ckpt") == 12
    assert find_latest_ckpt_path(str(root / "ckpt")) == str(root / "ckpt" / "global_step_12")

    exp = experiment("paper-grpo-math")
    cfg = compose_verl(
        overrides_for(
            exp,
            checkpoint_uri="s3://bucket/ckpt/ns/job",
            checkpoint_dir=str(root / "ckpt"),
            endpoint_url="http://minio:9000",
            tracking_uri="http://mlflow.sarl:5000",
        )
    )
    assert cfg.trainer.resume_mode == "auto"
    assert cfg.trainer.default_local_dir == str(root / "ckpt")
    assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
    assert "hf_model" not in cfg.actor_rollout_ref.actor.checkpoint.load_contents
    callback = StoreCheckpointCallback(config=cfg)
    assert (callback.uri, callback.endpoint_url) == ("s3://bucket/ckpt/ns/job", "http://minio:9000")
    env_vars = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env_vars == {"MLFLOW_TRACKING_URI": "http://mlflow.sarl:5000"}
