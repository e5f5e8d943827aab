"""Experiment spec -> TRL ``GRPOConfig``/``RLOOConfig`` for local CPU runs.

Called by ``sarl.runner.session``. The mapping, one field at a time:

* ``rollouts_per_prompt`` -> ``num_generations``; ``train_batch_size`` prompts per step ->
  ``per_device_train_batch_size = train_batch_size * num_generations`` (TRL counts completions);
  ``mini_batch_size``/``micro_batch_size_per_gpu`` are cluster (verl) knobs, unused on one CPU.
* ``learning_rate`` (constant, as verl's actor optimizer); ``kl_coef`` -> ``beta`` (TRL's KL
  is the k3 estimator = verl's ``low_var_kl`` before clamping; preflight refuses other types
  locally).
* ``max_response_length`` -> ``max_completion_length``; ``temperature``; ``epochs`` ->
  ``num_train_epochs``; ``max_steps``; ``seed``; ``entropy_coef`` (GRPO only).
* Saving is driven by sarl's checkpoint callback (``save_strategy="no"`` here), logging by its
  MLflow callback (``report_to="none"``).
* ``mask_truncated_completions`` is on exactly when a reward term ``masks_truncated``
  (``tag_maxflow``): tagged-reasoning A.7 masks truncated completions from the gradient as well
  as from that reward, and TRL's switch is that loss mask (its truncation rule is the one the
  adapter gives the reward, ``sarl.integrations.trl.bind_trainer``). It is not a spec field: no
  other reward here asks for it, and the switch drops a truncated completion's gradient for
  *every* reward term of the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sarl.rewards.registry import get_reward_class
from sarl.spec.experiment import Experiment


def trainer_classes(algorithm: str) -> tuple[Any, Any]:
    """(config class, trainer class) for ``grpo`` / ``rloo``."""
    if algorithm == "grpo":
        from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

        return GRPOConfig, GRPOTrainer
    if algorithm == "rloo":
        from trl import RLOOConfig, RLOOTrainer  # type: ignore[attr-defined]

        return RLOOConfig, RLOOTrainer
    raise ValueError(f"spec.algorithm.name={algorithm!r}: no local (TRL) trainer")


def training_args(
    config_cls: Any,
    exp: Experiment,
    output_dir: Path,
    weights: list[float],
    *,
    progress: bool = False,  # unused: the local session draws its own bar (callers still pass it)
) -> Any:
    algo = exp.spec.algorithm
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": algo.train_batch_size * algo.rollouts_per_prompt,
        "gradient_accumulation_steps": 1,
        "num_generations": algo.rollouts_per_prompt,
        "max_completion_length": algo.max_response_length,
        "learning_rate": algo.learning_rate,
        "beta": algo.kl_coef,
        "temperature": algo.temperature,
        "num_train_epochs": algo.epochs,
        "max_steps": algo.max_steps or -1,
        "seed": algo.seed,
        "reward_weights": weights,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        # Transformers' bars (ProgressCallback, or NotebookProgressCallback in Jupyter) print
        # every logged value; the session draws its own (sarl.runner.callbacks.StepProgress).
        "disable_tqdm": True,
        "shuffle_dataset": exp.spec.data.shuffle,
        "dataloader_num_workers": 0,
        # verl's actor optimizer keeps the learning rate constant (no warm-up by default);
        # transformers' default linear decay would make a short local run learn only at first.
        "lr_scheduler_type": "constant",
    }
    if algo.entropy_coef and "entropy_coef" in config_cls.__dataclass_fields__:
        kwargs["entropy_coef"] = algo.entropy_coef
    if masks_truncated(exp):
        kwargs["mask_truncated_completions"] = True  # GRPOConfig and RLOOConfig both have it
    return config_cls(**kwargs)


def masks_truncated(exp: Experiment) -> bool:
    """Whether a reward term of the spec masks truncated completions (see the docstring)."""
    return any(get_reward_class(term.name).masks_truncated for term in exp.spec.reward)
