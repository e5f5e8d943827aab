"""Checkpoint, scratch-disk and object-store sizes of a verl 0.9.1 run, with their sources.

Called by :mod:`sarl.plan.plan`. Bytes throughout.

* One actor checkpoint (``actor.checkpoint.save_contents: [model, optimizer, extra, hf_model]``,
  set by :mod:`sarl.integrations.verl.config`): verl's FSDP checkpoint manager
  (``utils/checkpoint/fsdp_checkpoint_manager.py``, 0.9.1) writes each rank's fp32 model shard
  (4 bytes per parameter in all), its optimizer shard (AdamW's two fp32 moments: 8 bytes) and
  the extra state (scheduler, RNG: negligible), and rank 0 writes the HF weights in bf16
  (``torch_dtype=torch.bfloat16``: 2 bytes). 14 bytes per parameter; the critic (PPO) has no
  HF copy: 12 bytes.
* The store (:class:`sarl_jobs.checkpoints.StoreCheckpointCallback`): each saved
  ``global_step_N`` directory is uploaded whole, then the store is pruned to
  ``storage.keep_last``, so a run holds ``keep_last`` checkpoints and, while one uploads, one
  more; the checkpoints of finished runs stay.
* A trainer pod's scratch disk: verl keeps ``max_actor_ckpt_to_keep`` (= ``keep_last``) local
  checkpoints, each node the shards of its own ranks and node 0 the HF weights too; the policy
  downloaded (its bf16 HF weights, 2 bytes per parameter); Ray's object spill and the
  compile caches (:data:`CACHES`, an assumption).
"""

from __future__ import annotations

from typing import Final

from sarl.plan.memory import GIB

#: fp32 model shards + AdamW's fp32 moments, bytes per parameter.
SHARDED_CHECKPOINT_BYTES_PER_PARAM: Final = 4 + 8
#: The HF copy rank 0 saves for evaluation (bf16).
HF_BYTES_PER_PARAM: Final = 2
#: Ray's object spill, torch/vLLM compile caches and datasets on a GPU trainer pod (assumption).
CACHES: Final = 30 * GIB
#: The same on a CPU pod or with the built-in tiny model (no vLLM, no compile caches).
SMALL_CACHES: Final = 1 * GIB


def actor_checkpoint(params: int) -> int:
    """Bytes of one actor checkpoint (sharded state and the HF weights)."""
    return (SHARDED_CHECKPOINT_BYTES_PER_PARAM + HF_BYTES_PER_PARAM) * params


def critic_checkpoint(params: int) -> int:
    """Bytes of one critic checkpoint (sharded state only)."""
    return SHARDED_CHECKPOINT_BYTES_PER_PARAM * params


def run_checkpoint(params: int, *, critic: bool) -> int:
    """Bytes of one ``global_step_N`` directory: the actor's and, for PPO, the critic's."""
    return actor_checkpoint(params) + (critic_checkpoint(params) if critic else 0)


def store_need(checkpoint: int, keep_last: int) -> int:
    """Store bytes one run holds at its peak: ``keep_last`` checkpoints and one uploading."""
    return (keep_last + 1) * checkpoint


def scratch_need(
    params: int, *, critic: bool, keep_last: int, nodes: int, caches: int = CACHES
) -> int:
    """Scratch bytes of the fullest trainer pod (node 0, which also holds the HF weights)."""
    sharded = SHARDED_CHECKPOINT_BYTES_PER_PARAM * params * (2 if critic else 1) // nodes
    local_checkpoints = keep_last * (sharded + HF_BYTES_PER_PARAM * params)
    download = HF_BYTES_PER_PARAM * params
    return local_checkpoints + download + caches
