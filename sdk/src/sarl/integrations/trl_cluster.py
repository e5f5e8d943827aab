"""Spec -> the TRL cluster job's settings: accelerate's FSDP2 config, the cluster batch layout
and the generation engine (vLLM colocated on the GPUs where the image has it).

Called by ``sarl_jobs.trl_trainer`` (the job) and by :mod:`sarl.integrations.cluster` (the
operator and ``sarl submit`` check a spec with it before anything runs). Pure: imports neither
TRL nor accelerate; the local mapping it builds on is ``sarl.runner.trl_config``.
"""

from __future__ import annotations

from typing import Any

from sarl.spec.experiment import Experiment

SUPPORTED = ("grpo", "rloo")
_MIXED_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "no"}


def check_supported(exp: Experiment) -> None:
    """Raise ValueError for algorithms TRL does not train here (PPO)."""
    name = exp.spec.algorithm.name
    if name not in SUPPORTED:
        raise ValueError(
            f"spec.algorithm.name={name!r}: the TRL trainer runs {' and '.join(SUPPORTED)} only; "
            "set spec.resources.backend: verl for PPO (GAE with a critic), or "
            "spec.algorithm.name: grpo"
        )


def processes_per_node(exp: Experiment) -> int:
    """Training processes per pod: one per GPU, one on a CPU-only node (``gpus_per_node: 0``)."""
    return max(exp.spec.resources.gpus_per_node, 1)


def accelerate_config(exp: Experiment) -> dict[str, Any]:
    """accelerate's config file (as written by ``accelerate config``) for FSDP2 on the spec's
    nodes and GPUs; ``machine_rank`` and the main process address are passed at launch.

    Only for GPU nodes: a CPU-only job (``gpus_per_node: 0``) is launched with torchrun and
    trains with DDP over gloo instead (FSDP2 shards with ``reduce_scatter``, which gloo does not
    implement), see ``sarl_jobs.trl_trainer``.
    """
    res = exp.spec.resources
    if res.gpus_per_node == 0:
        raise ValueError("spec.resources.gpus_per_node=0: FSDP2 needs GPUs (CPU jobs use DDP)")
    return {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "mixed_precision": _MIXED_PRECISION[exp.spec.model.dtype],
        "num_machines": res.nodes,
        "num_processes": res.nodes * res.gpus_per_node,
        "machine_rank": 0,
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "use_cpu": False,
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_offload_params": False,
            "fsdp_reshard_after_forward": True,
            # One file set on rank 0, so the checkpoint upload needs no shared filesystem.
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_activation_checkpointing": True,
        },
    }


def _batch_fix(exp: Experiment, world_size: int) -> str:
    """What to set so that one optimizer step's completions split evenly over the GPUs: the
    largest micro batch that does, else the GPUs per node that do."""
    algo, res = exp.spec.algorithm, exp.spec.resources
    completions = algo.mini_batch_size * algo.rollouts_per_prompt
    micro = [
        m for m in range(algo.responses_per_pass, 0, -1) if completions % (m * world_size) == 0
    ]
    if micro:
        return f"set spec.algorithm.micro_batch_size_per_gpu: {micro[0]}"
    gpus = [
        g
        for g in range(max(res.gpus_per_node, 1), 0, -1)
        if completions % (algo.responses_per_pass * g * res.nodes) == 0
    ]
    per_node = f"spec.resources.gpus_per_node: {gpus[0]}" if gpus else "fewer GPUs"
    return (
        f"set {per_node}, or spec.algorithm.mini_batch_size * rollouts_per_prompt to a multiple "
        f"of {world_size}"
    )


def cluster_overrides(exp: Experiment, world_size: int) -> dict[str, Any]:
    """Training arguments that differ from the local mapping on a GPU cluster.

    TRL counts completions per device and forward pass (``micro_batch_size_per_gpu``, capped by
    ``max_tokens_per_gpu``: :attr:`~sarl.spec.experiment.AlgorithmSpec.responses_per_pass`); one
    generation batch (``train_batch_size`` prompts) is ``steps_per_generation`` forward passes on
    every GPU, and an optimizer step (``mini_batch_size`` prompts) every
    ``gradient_accumulation_steps`` of them, as verl's mini-batches.
    """
    algo = exp.spec.algorithm
    n = algo.rollouts_per_prompt
    micro = algo.responses_per_pass
    per_step = micro * world_size  # completions per forward, all GPUs
    if algo.train_batch_size % algo.mini_batch_size:
        fit = max(d for d in range(1, algo.mini_batch_size + 1) if algo.train_batch_size % d == 0)
        raise ValueError(
            f"spec.algorithm: train_batch_size ({algo.train_batch_size}) must be a multiple of "
            f"mini_batch_size ({algo.mini_batch_size}) on the TRL trainer; set "
            f"spec.algorithm.mini_batch_size: {fit}"
        )
    if (algo.mini_batch_size * n) % per_step:
        raise ValueError(
            f"spec.algorithm: mini_batch_size * rollouts_per_prompt ({algo.mini_batch_size * n}) "
            f"must be a multiple of micro_batch_size_per_gpu * GPUs "
            f"({micro} * {world_size} = {per_step}) on the TRL trainer; "
            + _batch_fix(exp, world_size)
        )
    storage, dtype = exp.spec.storage, exp.spec.model.dtype
    cpu = exp.spec.resources.gpus_per_node == 0
    return {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": algo.mini_batch_size * n // per_step,
        "steps_per_generation": algo.train_batch_size * n // per_step,
        # Derived from the two above; the local config's value would conflict with them.
        "generation_batch_size": None,
        "use_cpu": cpu,
        # On GPUs FSDP2 checkpoints activations itself (accelerate_config); transformers refuses
        # the Trainer's own as well (Trainer.__init__, transformers 5.17-5.24: "can't both be set
        # to True"), and TRL turns it on by default. DDP on CPUs keeps TRL's.
        "gradient_checkpointing": cpu,
        # Mixed precision on GPUs only: CPU autocast in bf16 is slow and fp16 is refused there.
        "bf16": dtype == "bfloat16" and not cpu,
        "fp16": dtype == "float16" and not cpu,
        "save_strategy": "steps",
        "save_steps": storage.every_n_steps,
        "save_total_limit": storage.keep_last,
        "report_to": "none",  # sarl_jobs.trl_trainer logs through sarl's spooling Tracker
        "run_name": exp.name,
        "disable_tqdm": True,
    }


def generation_overrides(exp: Experiment, *, cuda: bool, vllm: bool) -> tuple[dict[str, Any], str]:
    """How the TRL job generates, and why: vLLM in colocate mode (TRL's ``use_vllm=True``,
    ``vllm_mode="colocate"``: each training process runs a vLLM engine on its own GPU, sharing it
    with the trainer) when ``spec.resources.trl_vllm`` is on, the node has CUDA (``cuda``) and
    the image has vLLM (``vllm``); otherwise transformers' ``model.generate`` (``use_vllm``
    False), several-fold slower per step. The caller reports the availability (the job probes
    ``torch.cuda`` and ``vllm``); nothing is imported here.

    vLLM's share of each GPU is ``spec.algorithm.rollout_gpu_memory_utilization`` (as verl's
    rollout), its context the prompt plus the response budget. Option names: TRL 1.16.0
    ``GRPOConfig``/``RLOOConfig`` (``use_vllm``, ``vllm_mode``, ``vllm_gpu_memory_utilization``,
    ``vllm_max_model_length``, ``vllm_tensor_parallel_size``)."""
    off = {"use_vllm": False}
    if not exp.spec.resources.trl_vllm:
        return off, "generating with transformers: spec.resources.trl_vllm is false"
    if not cuda:
        return off, "generating with transformers: no CUDA GPU on this node (vLLM needs one)"
    if not vllm:
        return off, (
            "generating with transformers: vllm is not installed in this image (build the TRL "
            "image with vLLM to generate several-fold faster)"
        )
    algo = exp.spec.algorithm
    on = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": algo.rollout_gpu_memory_utilization,
        "vllm_max_model_length": algo.max_prompt_length + algo.max_response_length,
        "vllm_tensor_parallel_size": 1,
    }
    return on, (
        f"generating with vLLM (colocate, {algo.rollout_gpu_memory_utilization:.0%} of each GPU)"
    )
