"""The TRL job's accelerate config (FSDP2) and training arguments map the spec; PPO is refused.
Skipped without accelerate (the verl environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")
pytest.importorskip("trl")

from sarl.integrations.trl_cluster import accelerate_config, check_supported, cluster_overrides
from sarl.runner.trl_config import trainer_classes, training_args
from sarl.spec.experiment import Experiment
from sarl_jobs.trl_trainer import main


def experiment(preset: str, **spec: Any) -> Experiment:
    return Experiment.model_validate(
        {"metadata": {"name": "job"}, "spec": {"preset": preset, **spec}}
    )


@pytest.mark.parametrize(
    ("preset", "precision"), [("paper-grpo-math", "bf16"), ("local-rloo-countdown", "no")]
)
def test_accelerate_config_is_fsdp2_on_the_spec_resources(preset: str, precision: str) -> None:
    exp = experiment(preset, resources={"nodes": 2, "gpus_per_node": 4})
    config = accelerate_config(exp)
    assert config["distributed_type"] == "FSDP"
    assert config["fsdp_config"]["fsdp_version"] == 2
    assert (config["num_machines"], config["num_processes"]) == (2, 8)
    assert config["mixed_precision"] == precision


def test_accelerate_config_is_read_by_accelerate(tmp_path: Path) -> None:
    import yaml
    from accelerate.commands.config.config_args import load_config_from_file

    path = tmp_path / "accelerate.yaml"
    path.write_text(yaml.safe_dump(accelerate_config(experiment("paper-grpo-math"))))
    loaded = load_config_from_file(str(path))
    assert loaded.fsdp_config["fsdp_version"] == 2
    assert loaded.num_processes == 8


@pytest.mark.parametrize(
    "preset", ["paper-grpo-math", "local-grpo-arithmetic", "local-rloo-countdown"]
)
def test_training_args_reuse_the_local_mapping_with_the_cluster_batches(
    preset: str, tmp_path: Path
) -> None:
    import dataclasses

    exp = experiment(preset)
    algo = exp.spec.algorithm
    world = 8 if preset.startswith("paper") else 1
    config_cls, _ = trainer_classes(algo.name)
    local = training_args(config_cls, exp, tmp_path, [1.0], progress=False)
    overrides = cluster_overrides(exp, world)
    assert (overrides["use_cpu"], overrides["bf16"]) == (False, exp.spec.model.dtype == "bfloat16")
    # Built on this CPU-only machine: transformers refuses bf16 without a GPU.
    args = dataclasses.replace(local, **{**overrides, "use_cpu": True, "bf16": False})
    assert (args.learning_rate, args.beta, args.num_generations) == (
        algo.learning_rate,
        algo.kl_coef,
        algo.rollouts_per_prompt,
    )
    completions = algo.train_batch_size * algo.rollouts_per_prompt
    assert args.per_device_train_batch_size * world * args.steps_per_generation == completions
    per_update = args.per_device_train_batch_size * world * args.gradient_accumulation_steps
    assert per_update == algo.mini_batch_size * algo.rollouts_per_prompt
    assert args.save_steps == exp.spec.storage.every_n_steps


def test_indivisible_batches_are_refused() -> None:
    # Without the preset's token budget (which would cap 3 responses a pass at 2).
    exp = experiment(
        "paper-grpo-math", algorithm={"micro_batch_size_per_gpu": 3, "max_tokens_per_gpu": None}
    )
    with pytest.raises(ValueError, match=r"micro_batch_size_per_gpu"):
        cluster_overrides(exp, 8)


def test_ppo_is_refused_with_a_pointer_to_verl(tmp_path: Path) -> None:
    import yaml

    exp = experiment("paper-ppo-math")
    with pytest.raises(ValueError, match=r"spec\.algorithm\.name='ppo'.*verl"):
        check_supported(exp)
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(exp.model_dump(mode="json")))
    with pytest.raises(ValueError, match=r"spec\.resources\.backend: verl"):
        main(path)  # refused before anything is launched, naming the fix


def test_on_gpus_only_fsdp_checkpoints_activations(tmp_path: Path) -> None:
    """transformers' ``Trainer.__init__`` (trainer.py, v5.17.0 to v5.24.0) refuses FSDP's
    activation checkpointing together with its own, and TRL's configs turn the latter on by
    default: the GPU job turns it off (FSDP2 does it), the CPU job (DDP) keeps TRL's."""
    import dataclasses

    from sarl_jobs.trl_trainer import _known_fields

    exp = experiment("paper-grpo-math")
    assert accelerate_config(exp)["fsdp_config"]["fsdp_activation_checkpointing"] is True
    config_cls, _ = trainer_classes("grpo")
    local = training_args(config_cls, exp, tmp_path, [1.0], progress=False)
    assert local.gradient_checkpointing  # TRL's default
    overrides = {**cluster_overrides(exp, 8), "use_cpu": True, "bf16": False}  # CPU-only here
    args = dataclasses.replace(local, **_known_fields(local, overrides))
    assert not args.gradient_checkpointing
    assert not getattr(args, "activation_checkpointing", False)
    cpu = experiment("local-grpo-arithmetic", resources={"gpus_per_node": 0})
    assert cluster_overrides(cpu, 1)["gradient_checkpointing"] is True


# ---- generation with vLLM where the node can (issue 35 item 11) ----


@pytest.mark.parametrize("algorithm", ["grpo", "rloo"])
def test_vllm_colocate_where_cuda_and_vllm_are_present(algorithm: str, tmp_path: Path) -> None:
    """Reported present (injected: no GPU or vLLM here), the TRL config generates with vLLM in
    colocate mode, its share of each GPU and context from the spec; the options are TRL's own
    (the installed ``GRPOConfig``/``RLOOConfig`` build with them)."""
    from sarl_jobs.trl_trainer import training_arguments

    preset = "paper-grpo-math" if algorithm == "grpo" else "local-rloo-countdown"
    # float32: no bf16, which transformers refuses on this CPU-only machine.
    exp = experiment(
        preset,
        model={"dtype": "float32"},
        algorithm={"name": algorithm, "rollout_gpu_memory_utilization": 0.4},
    )
    config_cls, _ = trainer_classes(algorithm)
    local = training_args(config_cls, exp, tmp_path, [1.0] * len(exp.spec.reward), progress=False)
    assert local.use_vllm is False  # TRL's default, and the local runner's
    world = 8 if algorithm == "grpo" else 1
    args, why = training_arguments(local, exp, world, cuda=True, vllm=True)
    assert isinstance(args, config_cls)
    assert (args.use_vllm, args.vllm_mode) == (True, "colocate")
    assert args.vllm_gpu_memory_utilization == 0.4
    algo = exp.spec.algorithm
    assert args.vllm_max_model_length == algo.max_prompt_length + algo.max_response_length
    assert "vLLM" in why and "colocate" in why


@pytest.mark.parametrize(
    ("cuda", "vllm", "spec", "reason"),
    [
        (False, True, {}, "no CUDA GPU"),
        (True, False, {}, "vllm is not installed"),
        (True, True, {"trl_vllm": False}, "spec.resources.trl_vllm is false"),
    ],
)
def test_transformers_generate_otherwise_with_the_reason(
    cuda: bool, vllm: bool, spec: dict[str, Any], reason: str, tmp_path: Path
) -> None:
    from sarl_jobs.trl_trainer import training_arguments

    exp = experiment("paper-grpo-math", model={"dtype": "float32"}, resources=spec)
    config_cls, _ = trainer_classes("grpo")
    local = training_args(config_cls, exp, tmp_path, [1.0] * len(exp.spec.reward), progress=False)
    args, why = training_arguments(local, exp, 8, cuda=cuda, vllm=vllm)
    assert args.use_vllm is False
    assert why.startswith("generating with transformers") and reason in why
