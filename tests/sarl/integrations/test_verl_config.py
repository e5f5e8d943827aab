"""The generated overrides compose against verl 0.9.1's own ``ppo_trainer.yaml`` and land at the
keys verl reads. Skipped without verl (the TRL environment)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

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
from sarl.integrations.verl.overrides import (  # noqa: E402
    MANAGER_OPTIONS_KEY,
    ScoreOptions,
    TermOptions,
    parse_manager_options,
    parse_score_options,
)
from sarl.rewards.base import Reward, RewardOutput, Sample  # noqa: E402
from sarl.rewards.registry import register_reward  # noqa: E402
from sarl.spec.experiment import Experiment  # noqa: E402
from sarl.spec.loader import load_study  # noqa: E402
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
    assert list(cfg.trainer.logger) == ["console"]  # no metrics file: nothing tracked
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 8)
    if algo.name == "ppo":
        assert cfg.critic.strategy == "fsdp2"
        assert cfg.critic.optim.lr == algo.critic_learning_rate
    rollout, ref = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref
    assert rollout.gpu_memory_utilization == algo.rollout_gpu_memory_utilization
    # The token budget the plan sized reaches every pass (verl's oc.select defaults carry the
    # actor's to the ref and rollout log-prob passes; sarl sets them explicitly too).
    budget = algo.max_tokens_per_gpu
    assert actor.use_dynamic_bsz == (budget is not None)
    assert rollout.log_prob_use_dynamic_bsz == ref.log_prob_use_dynamic_bsz == (budget is not None)
    if budget is not None:
        assert actor.ppo_max_token_len_per_gpu == budget
        assert rollout.log_prob_max_token_len_per_gpu == ref.log_prob_max_token_len_per_gpu
        assert ref.log_prob_max_token_len_per_gpu == budget
        if algo.name == "ppo":
            assert cfg.critic.use_dynamic_bsz and cfg.critic.ppo_max_token_len_per_gpu == budget
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
    metrics = os.path.join(tmp_path, "tracking", "metrics.jsonl")
    os.makedirs(os.path.join(tmp_path, "tracking", "snapshots"))  # made by the job's driver
    cfg = compose_verl(overrides_for(exp, metrics_file=metrics))
    # verl's file logger (not its MLflow logger) writes where the job's tracker reads.
    assert list(cfg.trainer.logger) == ["console", "file"]
    env_vars = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env_vars == {"VERL_FILE_LOGGER_PATH": metrics}
    assert cfg.trainer.save_freq == exp.spec.storage.every_n_steps
    callback = StoreCheckpointCallback(config=cfg)
    assert (callback.uri, callback.keep_last) == (str(tmp_path), 2)
    assert str(callback.metrics_file) == metrics


def test_builtin_model_needs_a_model_path() -> None:
    with pytest.raises(ValueError, match=r"spec\.model\.name"):
        verl_overrides(
            experiment("local-grpo-arithmetic"),
            train_files="t",
            val_files="v",
            n_gpus_per_node=1,
            nnodes=1,
        )


STUDIES = sorted((Path(__file__).resolve().parents[3] / "examples" / "studies").glob("*.yaml"))


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_arm_of_the_example_studies_composes_with_all_its_terms(path: Path) -> None:
    """Each arm's run (first seed; seeds change only ``data.seed``) composes against verl's
    config, and the reward function or manager verl loads gets every term with its weight,
    weight-0 terms included (verl 0.9.1 ``trainer/ppo/reward.py:get_custom_reward_fn`` /
    ``resolve_reward_manager_cls``)."""
    from sarl.integrations.verl.reward_manager import SarlRewardManager

    study = load_study(path)
    runs = {run.arm: run for run in reversed(study.runs())}  # the first seed of each arm
    assert list(runs) == [arm.name for arm in reversed(study.spec.arms)]
    for run in runs.values():
        exp = run.experiment
        cfg = compose_verl(overrides_for(exp))
        fn = get_custom_reward_fn(cfg)
        if fn is None:
            assert resolve_reward_manager_cls(cfg) is SarlRewardManager
            options: ScoreOptions = parse_manager_options(
                OmegaConf.to_container(OmegaConf.select(cfg, MANAGER_OPTIONS_KEY))  # type: ignore[arg-type]
            )
        else:
            options = parse_score_options(fn.args[1])
        got = [(t.reward, t.weight) for t in options.term_list()]
        assert got == [(t.name, t.weight) for t in exp.spec.reward], run.name
        # One term with weight 1.0 keeps the single-reward options it always had.
        assert (options.terms is None) == (got == [(got[0][0], 1.0)])


def with_reward(preset: str, *reward: dict[str, object]) -> Experiment:
    return Experiment.model_validate(
        {"metadata": {"name": "job"}, "spec": {"preset": preset, "reward": list(reward)}}
    )


def test_a_weighted_single_term_is_trained_with_its_weight() -> None:
    exp = with_reward("paper-grpo-math", {"name": "structure", "weight": 2.0})
    fn = get_custom_reward_fn(compose_verl(overrides_for(exp)))
    assert fn is not None
    assert parse_score_options(fn.args[1]).terms == [TermOptions(reward="structure", weight=2.0)]


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_a_masking_term_needs_a_truncated_score_only_when_trained_on(weight: float) -> None:
    """A weight-0 term is only reported, so its NaN for a masked completion never reaches
    verl's rewards; a weighted one would."""
    from sarl.integrations.verl.reward_manager import SarlRewardManager

    maxflow = {"name": "tag_maxflow", "weight": weight, "settings": {"model": "some/model"}}
    exp = with_reward("local-grpo-arithmetic", {"name": "ground_truth"}, maxflow)
    if weight:
        with pytest.raises(ValueError, match=r"spec\.reward\[1\]\.settings\.truncated_score"):
            overrides_for(exp)
        return
    cfg = compose_verl(overrides_for(exp))
    assert resolve_reward_manager_cls(cfg) is SarlRewardManager  # it sees the tokens


def test_a_reward_in_two_terms_is_refused_naming_the_fix() -> None:
    exp = with_reward(
        "paper-grpo-math", {"name": "structure"}, {"name": "structure", "weight": 0.0}
    )
    with pytest.raises(ValueError, match=r"spec\.reward\[1\]\.name='structure'.*merge"):
        overrides_for(exp)


def test_resume_layout_is_the_one_verl_resumes_from(tmp_path: os.PathLike[str]) -> None:
    """What sarl_jobs.resume restores from the store is found by verl's own resume lookup,
    and the composed config resumes automatically from that directory."""
    pytest.importorskip("minio")
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
        )
    )
    assert cfg.trainer.resume_mode == "auto"
    assert cfg.trainer.default_local_dir == str(root / "ckpt")
    assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents
    assert "hf_model" not in cfg.actor_rollout_ref.actor.checkpoint.load_contents
    callback = StoreCheckpointCallback(config=cfg)
    assert (callback.uri, callback.endpoint_url) == ("s3://bucket/ckpt/ns/job", "http://minio:9000")
