"""Per-GPU memory of a verl 0.9.1 FSDP2 RL job, term by term, each with the source it follows.

Called by :mod:`sarl.plan.plan`. Pure arithmetic on a :class:`~sarl.plan.shapes.ModelShape`;
bytes throughout. The job (verl's hybrid engine, one process per GPU) alternates two phases on
the same GPUs, and a GPU must hold the larger:

* **rollout**: vLLM generates; it takes ``gpu_memory_utilization`` of the GPU's *total* memory
  (vLLM's definition of the setting, ``vllm/config/cache.py``), beside the trainer's sharded
  state, which stays on the GPU (verl 0.9.1 ``trainer/config/engine/fsdp.yaml``:
  ``param_offload: false``, ``optimizer_offload: false``).
* **training**: vLLM sleeps (verl ``rollout/rollout.yaml`` ``free_cache_engine: True``: weights
  offloaded, KV cache freed; its CUDA graphs stay, :data:`VLLM_SLEEP_RESIDUAL`) while the actor
  (and the critic, for PPO) runs forward and backward passes of one micro-batch at a time.

Sources of the terms:

* Sharded state (:func:`sharded_state`): verl builds the actor, critic and reference models in
  fp32 (``model_dtype: fp32`` of each ``fsdp_config``, ``_generated_ppo_trainer.yaml``) and
  computes in bf16 (``mixed_precision.param_dtype: bf16``); AdamW keeps two fp32 moments.
  Trained models: 4 (fp32 weights) + 4 (fp32 gradients) + 8 (Adam) = 16 bytes per parameter,
  the same total as ZeRO's mixed-precision Adam (Rajbhandari et al. 2020, §3.1, "16Ψ"); the
  reference model: 4 bytes. FSDP2 full sharding divides both by the number of GPUs.
* Gathered parameters (:func:`gathered`): FSDP2 unshards one transformer block at a time in
  bf16, the next one prefetched, and reduce-scatters its fp32 gradients; the embedding (and an
  untied output projection) is its own unit.
* Activations (:func:`activations`): with gradient checkpointing (sarl turns it on for the
  actor and the critic) each layer keeps its bf16 input, and one layer's full activations are
  rebuilt during its backward pass (Korthikanti et al. 2022, "Reducing Activation Recomputation
  in Large Transformer Models", §4, with flash attention, i.e. without the s² terms, and
  rewritten for a SwiGLU MLP and grouped-query attention).
* Logits (:func:`logits`): verl's FSDP engine (``workers/engine/fsdp/transformer_impl.py``,
  ``forward_step``) takes the model's bf16 logits of the whole packed micro-batch (tokens x
  vocabulary) and computes log-probabilities and, for the entropy it logs, ``softmax`` and
  ``softmax * logits`` of the same size (``utils/torch_functional.py: entropy_from_logits``);
  the update's backward pass adds the logits' gradient. :data:`LOGIT_COPIES` counts them.
* vLLM's KV cache (:func:`kv_cache_tokens`): what is left of vLLM's share after the bf16
  weights, the activations of one ``max_num_batched_tokens`` forward pass (verl's default 8192,
  ``rollout/rollout.yaml``) and its CUDA graphs; 2 x layers x kv heads x head dim x 2 bytes per
  token (:attr:`~sarl.plan.shapes.ModelShape.kv_bytes_per_token`).

The constants below are assumptions, not measurements; the plan prints them.
"""

from __future__ import annotations

from typing import Final

from sarl.plan.shapes import ModelShape

GIB: Final = 1024**3
#: Bytes per parameter of a trained model's state: fp32 weights, fp32 gradients, Adam's moments.
TRAINED_BYTES_PER_PARAM: Final = 4 + 4 + 8
#: Bytes per parameter of the frozen reference model (fp32, verl's ref ``model_dtype``).
REFERENCE_BYTES_PER_PARAM: Final = 4
#: (tokens x vocabulary) bf16 tensors alive at the peak of a pass (see the module docstring).
LOGIT_COPIES: Final = 3
#: CUDA context, NCCL buffers and the caching allocator's reserve (assumption).
CUDA_OVERHEAD: Final = int(1.5 * GIB)
#: What a sleeping vLLM keeps on the GPU: CUDA graphs and its context (assumption).
VLLM_SLEEP_RESIDUAL: Final = 1 * GIB
#: vLLM's tokens per forward pass (verl 0.9.1 ``rollout.max_num_batched_tokens``).
VLLM_BATCHED_TOKENS: Final = 8192
#: Share of a GPU the plan lets a phase's peak reach: the rest is the caching allocator's
#: fragmentation (assumption; PyTorch's allocator rounds and splits blocks).
USABLE_SHARE: Final = 0.9


def sharded_state(params: int, gpus: int, *, trained: bool) -> int:
    """Bytes per GPU of one model's FSDP2-sharded state."""
    per_param = TRAINED_BYTES_PER_PARAM if trained else REFERENCE_BYTES_PER_PARAM
    return per_param * params // gpus


def gathered(shape: ModelShape) -> int:
    """Bytes of the unsharded pieces at a time: two blocks' bf16 weights (one prefetched), one
    block's fp32 gradients before their reduce-scatter, and the bf16 embedding units."""
    block = shape.layer_parameters
    return 2 * block * 2 + block * 4 + shape.embedding_parameters * 2


def layer_activation_bytes_per_token(shape: ModelShape) -> int:
    """bf16 activations of one decoder layer per token, kept for its backward pass.

    Attention: the norm's output, q, k, v, the attention output and the output projection's
    input (flash attention keeps no s x s scores); MLP: the norm's output, gate, up, SiLU(gate)
    and their product; two residual inputs."""
    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    q = shape.heads * shape.head_dim
    attention = 2 * (h + q + 2 * kv + q + q)
    mlp = 2 * (h + 4 * shape.intermediate)
    return attention + mlp + 2 * 2 * h


def activations(shape: ModelShape, tokens: int, *, checkpointing: bool = True) -> int:
    """Activation bytes of a forward and backward pass over ``tokens`` packed tokens."""
    per_layer = layer_activation_bytes_per_token(shape) * tokens
    if not checkpointing:
        return per_layer * shape.layers
    inputs = 2 * shape.hidden * tokens * shape.layers  # one bf16 input per checkpointed layer
    return inputs + per_layer


def logits(shape: ModelShape, tokens: int) -> int:
    """Bytes of the bf16 logits of ``tokens`` tokens and their copies at a pass's peak."""
    return LOGIT_COPIES * tokens * shape.vocab * 2


def vllm_share(gpu_memory: int, utilization: float) -> int:
    """Bytes vLLM reserves on each GPU: ``utilization`` of the GPU's total memory."""
    return int(gpu_memory * utilization)


def vllm_activations(shape: ModelShape) -> int:
    """vLLM's profiled forward pass: one layer's activations over its batched tokens, and the
    fp32 logits of up to 256 sequences (``max_num_seqs``)."""
    per_layer = layer_activation_bytes_per_token(shape) * VLLM_BATCHED_TOKENS
    return per_layer + 256 * shape.vocab * 4


def kv_cache_tokens(shape: ModelShape, share: int, tensor_parallel: int = 1) -> int:
    """Tokens vLLM's KV cache holds per GPU within ``share`` bytes (0 if nothing is left)."""
    weights = shape.parameters * 2 // tensor_parallel
    free = share - weights - vllm_activations(shape) - VLLM_SLEEP_RESIDUAL
    per_token = shape.kv_bytes_per_token // tensor_parallel
    return max(free, 0) // per_token
