"""Experiment spec -> verl 0.9.1 Hydra overrides of ``verl/trainer/config/ppo_trainer.yaml``.

Called by ``sarl_jobs.verl_trainer`` (the job) and by :mod:`sarl.integrations.cluster` (the
operator and ``sarl submit`` check a spec with it before anything runs). Pure: imports neither
verl nor Hydra. Every key is checked against verl 0.9.1's own config by
``tests/sarl/integrations/test_verl_config.py``, which composes the result. The mapping:

* ``algorithm.name`` -> ``algorithm.adv_estimator`` (:data:`ADV_ESTIMATORS`, names of verl's
  ``AdvantageEstimator``); PPO adds the critic (verl enables it for ``gae``).
* Batches are in prompts, as in verl: ``train_batch_size`` -> ``data.train_batch_size``,
  ``mini_batch_size`` -> ``actor.ppo_mini_batch_size`` (and the critic's, by verl's own
  interpolation), ``micro_batch_size_per_gpu`` -> every ``*micro_batch_size_per_gpu``.
* KL as a loss term (``use_kl_loss``, ``kl_loss_coef``, ``kl_loss_type``), never in the reward
  (``algorithm.use_kl_in_reward=False``), as in Tables 6/7.
* Evaluation: ``trainer.test_freq`` and ``rollout.val_kwargs`` (k samples at the eval
  temperature; for group rewards ``val_kwargs.n`` must be the group size, see
  ``sarl.integrations.verl.reward_manager``).
* Checkpoints: ``trainer.save_freq``, ``trainer.resume_mode=auto`` on ``default_local_dir``
  (filled from the store by :mod:`sarl_jobs.resume`), HF weights saved too (for evaluation);
  ``trainer.checkpoint_callback_class`` is
  :class:`sarl_jobs.checkpoints.StoreCheckpointCallback`, which pushes each saved
  ``global_step_N`` directory to ``storage.checkpoint_uri`` (settings under ``sarl.storage``).
* Rewards: :func:`sarl.integrations.verl.overrides.verl_reward_overrides` for one term with
  weight 1.0, :func:`~sarl.integrations.verl.overrides.verl_terms_overrides` otherwise (several
  terms, weight-0 terms that are only reported, other weights: verl trains on
  ``sum(weight * term)`` and gets every term as ``reward/<name>`` and ``<name>/<component>``,
  :mod:`sarl.integrations.verl.terms`). Group rewards go to ``SarlRewardManager`` (with every
  other term of the spec), and so do rewards that mask truncated completions, ``tag_maxflow``:
  the manager sees the tokens that tell a truncated response. verl 0.9.1 cannot drop those from
  the loss, unlike TRL's ``mask_truncated_completions``, so such a reward must give them a
  numeric ``truncated_score`` unless its weight is 0; a spec leaving it None is refused, naming
  the field. Refused too, naming the field: a reward appearing in two terms (its curves would
  share one name) and ``embedder.kind: policy``.
* Reward validity: the v1 trainer in ``sync`` mode with
  :class:`sarl.integrations.verl.sampler.SarlReplayBuffer` as its replay buffer
  (``trainer.v1.sampler.custom_sampler``), which adds each step's ``validity/<reward>/...``
  figures (AUROC and within-group pair agreement against ground-truth correctness, every term
  weight 0 included) to verl's step metrics; same names as the local runner's.
* Vote sets (a group reward with ``votes_per_prompt`` above ``rollouts_per_prompt``, TTRL's
  ``n_votes_per_prompt``): ``rollout.n`` stays the trained group, the training rows ask for the
  vote set (``__rollout_n__``), the reward manager scores groups of that size and so does
  validation, and the replay buffer keeps each prompt's first ``rollouts_per_prompt`` responses
  for training (:mod:`sarl.integrations.verl.votes`).
* Tracking: with ``metrics_file`` (the job passes one when a tracking URI is set),
  ``trainer.logger=[console,file]``: verl's file logger appends each step's metrics to that file,
  which the job's driver follows into sarl's spooling tracker (:mod:`sarl_jobs.verl_tracking`),
  not verl's MLflow logger, which drops a step's metrics after 3 failed tries. The logger reads
  its path (``VERL_FILE_LOGGER_PATH``) from the environment of verl's TaskRunner actor, so it is
  passed through Ray's ``runtime_env``; the checkpoint callback gets it as
  ``sarl.tracking.metrics_file``. Without one, ``[console]``: nothing is tracked.
* Checkpoint loading: every Ray worker runs :data:`SAFE_LOAD_HOOK` first (``runtime_env.
  worker_process_setup_hook``), so verl reads its checkpoint files with ``torch.load
  (weights_only=True)``, never full pickle (:mod:`sarl_jobs.safe_load`, issue 36).
"""

from __future__ import annotations

from typing import Final

from sarl.integrations.verl.overrides import (
    TermOptions,
    hydra_value,
    verl_reward_overrides,
    verl_terms_overrides,
)
from sarl.integrations.verl.votes import vote_overrides
from sarl.rewards.registry import get_reward_class, parse_settings
from sarl.spec.experiment import Experiment

#: spec ``algorithm.name`` -> verl 0.9.1 ``algorithm.adv_estimator``.
ADV_ESTIMATORS: Final = {"ppo": "gae", "grpo": "grpo", "rloo": "rloo"}
CHECKPOINT_CALLBACK: Final = "sarl_jobs.checkpoints.StoreCheckpointCallback"
#: Run in every Ray worker before verl's code: checkpoints load without full pickle.
SAFE_LOAD_HOOK: Final = "sarl_jobs.safe_load.install"
#: verl's replay buffer with the reward-validity metrics (``trainer.v1.sampler.custom_sampler``).
SAMPLER_PATH: Final = "pkg://sarl.integrations.verl.sampler"
SAMPLER_NAME: Final = "SarlReplayBuffer"
#: Top-level config section read by :class:`sarl_jobs.checkpoints.StoreCheckpointCallback`.
SARL_STORAGE_KEY: Final = "sarl.storage"
_AR = "actor_rollout_ref"


def verl_overrides(
    exp: Experiment,
    *,
    train_files: str,
    val_files: str,
    n_gpus_per_node: int,
    nnodes: int,
    model_path: str | None = None,
    checkpoint_uri: str | None = None,
    checkpoint_dir: str | None = None,
    endpoint_url: str | None = None,
    metrics_file: str | None = None,
) -> list[str]:
    """The Hydra overrides that run ``exp`` with verl 0.9.1's ``main_ppo``.

    ``model_path`` replaces ``spec.model.name`` (required for the built-in model, which the job
    builds locally first); ``checkpoint_uri`` and ``endpoint_url`` replace ``storage.*`` (None in
    both: no upload); ``checkpoint_dir`` is verl's local checkpoint directory, resumed from
    automatically (:mod:`sarl_jobs.resume` fills it from the store); ``metrics_file`` is where
    verl's file logger writes the metrics the job's tracker sends (None: console only). Raises
    ValueError naming the field for specs verl cannot run.
    """
    spec = exp.spec
    algo = spec.algorithm
    model = model_path or spec.model.name
    if model_path is None and spec.model.is_builtin:
        raise ValueError(
            f"spec.model.name={spec.model.name!r}: pass model_path (the built model's directory)"
        )
    values: dict[str, object] = {
        "algorithm.adv_estimator": ADV_ESTIMATORS[algo.name],
        "algorithm.use_kl_in_reward": False,
        "data.train_files": train_files,
        "data.val_files": val_files,
        "data.train_batch_size": algo.train_batch_size,
        "data.max_prompt_length": algo.max_prompt_length,
        "data.max_response_length": algo.max_response_length,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.shuffle": spec.data.shuffle,
        "data.seed": algo.seed,
        **_actor_rollout_ref(exp, model),
        **_trainer(exp, n_gpus_per_node=n_gpus_per_node, nnodes=nnodes),
    }
    if checkpoint_dir is not None:
        values["trainer.default_local_dir"] = checkpoint_dir
    if algo.name == "ppo":
        values.update(
            {
                "critic.strategy": "fsdp2",
                "critic.model.path": model,
                "critic.model.enable_gradient_checkpointing": True,
                "critic.optim.lr": algo.critic_learning_rate,
                "critic.ppo_micro_batch_size_per_gpu": algo.micro_batch_size_per_gpu,
            }
        )
    lines = [f"{key}={hydra_value(value)}" for key, value in values.items()]
    lines += _sampler(exp)
    if exp.spec.votes_per_prompt is not None:  # trained on the first responses of each prompt
        lines += vote_overrides(algo.rollouts_per_prompt)
    lines += _reward(exp)
    lines += _storage(exp, checkpoint_uri, endpoint_url)
    lines += _tracking_env(metrics_file)
    lines.append(f"++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={SAFE_LOAD_HOOK}")
    return lines


def _actor_rollout_ref(exp: Experiment, model: str) -> dict[str, object]:
    algo, evaluation = exp.spec.algorithm, exp.spec.evaluation
    micro = algo.micro_batch_size_per_gpu
    group = any(get_reward_class(t.name).needs_group for t in exp.spec.reward)
    return {
        f"{_AR}.model.path": model,
        f"{_AR}.model.enable_gradient_checkpointing": True,
        f"{_AR}.actor.strategy": "fsdp2",
        f"{_AR}.actor.optim.lr": algo.learning_rate,
        f"{_AR}.actor.ppo_mini_batch_size": algo.mini_batch_size,
        f"{_AR}.actor.ppo_micro_batch_size_per_gpu": micro,
        f"{_AR}.actor.use_kl_loss": algo.kl_coef > 0,
        f"{_AR}.actor.kl_loss_coef": algo.kl_coef,
        f"{_AR}.actor.kl_loss_type": algo.kl_type,
        f"{_AR}.actor.entropy_coeff": algo.entropy_coef,
        # Also save HF weights (actor/huggingface/) so the evaluation job can load a checkpoint
        # without verl's FSDP shard layout; resuming loads the shards only.
        f"{_AR}.actor.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        f"{_AR}.actor.checkpoint.load_contents": ["model", "optimizer", "extra"],
        f"{_AR}.ref.strategy": "fsdp2",
        f"{_AR}.ref.log_prob_micro_batch_size_per_gpu": micro,
        f"{_AR}.rollout.name": "vllm",
        f"{_AR}.rollout.n": algo.rollouts_per_prompt,
        f"{_AR}.rollout.temperature": algo.temperature,
        f"{_AR}.rollout.log_prob_micro_batch_size_per_gpu": micro,
        # The paper's 4B policy fits on one GPU; verl's default (2) fails on a single GPU.
        f"{_AR}.rollout.tensor_model_parallel_size": 1,
        # Group rewards need whole groups (the vote set, if any) at validation too
        # (SarlRewardManager checks it).
        f"{_AR}.rollout.val_kwargs.n": _group_size(exp) if group else evaluation.k,
        f"{_AR}.rollout.val_kwargs.temperature": evaluation.temperature,
        f"{_AR}.rollout.val_kwargs.do_sample": True,
        f"{_AR}.rollout.gpu_memory_utilization": algo.rollout_gpu_memory_utilization,
        **_dynamic_batch(exp),
    }


def _dynamic_batch(exp: Experiment) -> dict[str, object]:
    """``algorithm.max_tokens_per_gpu``: verl's dynamic batch for the actor's update and (by
    verl's own ``oc.select`` defaults in ``trainer/config/ref/ref.yaml`` and
    ``rollout/rollout.yaml``) the ref and rollout log-prob passes; the critic, whose
    ``ppo_max_token_len_per_gpu`` defaults to 32768, gets the same budget."""
    budget = exp.spec.algorithm.max_tokens_per_gpu
    if budget is None:
        return {}
    values: dict[str, object] = {
        f"{_AR}.actor.use_dynamic_bsz": True,
        f"{_AR}.actor.ppo_max_token_len_per_gpu": budget,
        f"{_AR}.ref.log_prob_max_token_len_per_gpu": budget,
        f"{_AR}.rollout.log_prob_max_token_len_per_gpu": budget,
    }
    if exp.spec.algorithm.name == "ppo":
        values["critic.ppo_max_token_len_per_gpu"] = budget
    return values


def _trainer(exp: Experiment, *, n_gpus_per_node: int, nnodes: int) -> dict[str, object]:
    algo = exp.spec.algorithm
    values: dict[str, object] = {
        "trainer.total_epochs": algo.epochs,
        "trainer.save_freq": exp.spec.storage.every_n_steps,
        "trainer.test_freq": exp.spec.evaluation.every_n_steps,
        "trainer.critic_warmup": 0,
        "trainer.n_gpus_per_node": n_gpus_per_node,
        "trainer.nnodes": nnodes,
        "trainer.project_name": exp.spec.tracking.experiment_name or exp.name,
        "trainer.experiment_name": exp.name,
        "trainer.checkpoint_callback_class": CHECKPOINT_CALLBACK,
        "trainer.max_actor_ckpt_to_keep": exp.spec.storage.keep_last,
        "trainer.max_critic_ckpt_to_keep": exp.spec.storage.keep_last,
        # Resume from trainer.default_local_dir's newest checkpoint when there is one.
        "trainer.resume_mode": "auto",
    }
    if algo.max_steps is not None:
        values["trainer.total_training_steps"] = algo.max_steps
    return values


def _sampler(exp: Experiment) -> list[str]:
    """verl's sync replay buffer with the reward-validity metrics (verl.sampler.SarlReplayBuffer);
    ``sarl_reward`` names the single reward (several terms are named by their extra info)."""
    name = get_reward_class(exp.spec.reward[0].name).name
    values = {
        "trainer.v1.trainer_mode": "sync",
        "trainer.v1.sampler.custom_sampler.path": SAMPLER_PATH,
        "trainer.v1.sampler.custom_sampler.name": SAMPLER_NAME,
        "++trainer.v1.sampler.sampler_kwargs.sarl_reward": name,
    }
    return [f"{key}={hydra_value(value)}" for key, value in values.items()]


def _reward(exp: Experiment) -> list[str]:
    terms = exp.spec.reward
    classes = [get_reward_class(t.name) for t in terms]
    seen: dict[str, int] = {}
    for i, (term, reward_cls) in enumerate(zip(terms, classes, strict=True)):
        if reward_cls.name in seen:
            # Each term is reported under its reward's name (reward/<name>, <name>/<component>).
            raise ValueError(
                f"spec.reward[{i}].name={term.name!r}: reward {reward_cls.name!r} is already "
                f"spec.reward[{seen[reward_cls.name]}]; on the verl trainer each reward may appear "
                "once (its curves are named after it): merge the two terms into one"
            )
        seen[reward_cls.name] = i
        _check_embedder(i, term.settings)
        if reward_cls.masks_truncated and term.weight != 0.0:
            # weight 0: the term is only reported, so a NaN for a masked completion is harmless.
            _check_truncated_score(i, term.name, term.settings)
    group = any(c.needs_group for c in classes)
    # the manager sees the response tokens, so it can tell truncated responses
    manager = group or any(c.masks_truncated for c in classes)
    group_size = _group_size(exp) if group else None
    if len(terms) == 1 and terms[0].weight == 1.0:
        term = terms[0]
        return verl_reward_overrides(term.name, term.settings, group=manager, group_size=group_size)
    # Several terms, weight-0 terms (reported, not trained on) or another weight: one weighted
    # sum, each term reported as reward/<name> and <name>/<component> (see verl.terms).
    weighted = [TermOptions(reward=t.name, weight=t.weight, settings=t.settings) for t in terms]
    return verl_terms_overrides(weighted, group=manager, group_size=group_size)


def _group_size(exp: Experiment) -> int:
    """Responses per prompt a group reward scores together: the vote set when a reward votes
    over more than the trained group (generated per training prompt through ``__rollout_n__``,
    :mod:`sarl.integrations.verl.votes`), else ``rollouts_per_prompt``."""
    return exp.spec.votes_per_prompt or exp.spec.algorithm.rollouts_per_prompt


def _check_embedder(index: int, settings: dict[str, object]) -> None:
    embedder = settings.get("embedder")
    if isinstance(embedder, dict) and embedder.get("kind") == "policy":
        # verl scores rollouts in its reward loop, which gets text and token ids but not the
        # actor (FSDP workers in other Ray processes); its rollouts come from vLLM/SGLang, which
        # do not return hidden states. Implementation A would need a custom actor worker.
        raise ValueError(
            f"spec.reward[{index}].settings.embedder.kind='policy': the verl trainer cannot give "
            "the reward the policy's hidden states (SARL v1 A.1 Implementation A); use 'openai' "
            "(Implementation B, the paper's choice with served rollouts), 'local' or "
            "'hf_causal', or the TRL backend (spec.resources.backend: trl)"
        )


def _check_truncated_score(index: int, name: str, settings: dict[str, object]) -> None:
    """A reward that masks truncated completions needs a number for them on verl (see below)."""
    if getattr(parse_settings(name, settings), "truncated_score", 0.0) is None:
        # tagged-reasoning A.7 masks them from the gradient; verl 0.9.1 has no switch for that
        # and takes only finite rewards, so the masking cannot be reproduced: say so up front.
        raise ValueError(
            f"spec.reward[{index}].settings.truncated_score: reward {name!r} masks truncated "
            "completions (NaN), which verl cannot do (no loss mask for them, finite rewards "
            "only); set a number (e.g. 0.0) to score them on verl, or use the TRL backend "
            "(spec.resources.backend: trl), which masks them from the loss"
        )


def _storage(exp: Experiment, checkpoint_uri: str | None, endpoint_url: str | None) -> list[str]:
    storage = exp.spec.storage
    values: dict[str, object] = {
        "checkpoint_uri": checkpoint_uri or storage.checkpoint_uri,
        "endpoint_url": endpoint_url or storage.endpoint_url,
        "keep_last": storage.keep_last,
    }
    return [f"++{SARL_STORAGE_KEY}.{k}={hydra_value(v)}" for k, v in values.items()]


def _tracking_env(metrics_file: str | None) -> list[str]:
    """verl's loggers: the console, and the file the job's tracker follows (see the docstring)."""
    if metrics_file is None:
        return [f"trainer.logger={hydra_value(['console'])}"]
    path = hydra_value(metrics_file)
    return [
        f"trainer.logger={hydra_value(['console', 'file'])}",
        f"++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={path}",
        f"++sarl.tracking.metrics_file={path}",  # read by sarl_jobs.checkpoints
    ]
