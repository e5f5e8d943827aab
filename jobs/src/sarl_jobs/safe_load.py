"""verl's resume without pickle's code execution: its checkpoint files loaded ``weights_only``.

verl 0.9.1 reads a checkpoint's ``.pt`` files with ``torch.load(..., weights_only=False)``: a
pickle can name any importable callable, so a planted file runs code in the trainer (issue 36).
:func:`install` makes those modules load with ``weights_only=True`` (PyTorch's restricted
unpickler: tensors, containers, primitives and the types in its safe-globals list) by replacing
the name ``torch`` in each of them with :data:`SAFE_TORCH`, which is ``torch`` except for
``load`` (:func:`safe_load`). verl itself is not edited.

The files verl reads when it resumes, and what makes each loadable without full pickle
(checked by saving and loading real objects in ``tests/jobs/test_safe_load.py``):

* ``model_world_size_W_rank_R.pt`` and ``optim_world_size_W_rank_R.pt``
  (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``, ``load_checkpoint``; FSDP2, used by
  every sarl job: ``actor.strategy=fsdp2``): tensors and ``DTensor`` shards, whose pieces
  (``DTensorSpec``, ``DeviceMesh``, ``Shard``, ...) PyTorch 2.13 already lists as safe globals;
  optimizer scalars and param groups are plain data.
* ``extra_state_world_size_W_rank_R.pt`` (same function): the LR scheduler's state (plain data)
  and the RNG states (``BaseCheckpointManager.get_rng_state``); NumPy's is a tuple holding a
  ``numpy.ndarray``, for which :data:`NUMPY_GLOBALS` allows the array reconstructor, ``ndarray``
  and the dtypes — the list transformers allows for its own RNG file (``trainer_pt_utils.
  safe_globals``, transformers 5.24.0). Rebuilding an array runs no code of the file's choosing.
* ``data.pt`` (``verl/trainer/ppo/v1/trainer_base.py``, ``_load_checkpoint``; and the legacy
  ``verl/trainer/ppo/ray_trainer.py``) and ``data_<dp_rank>.pt``
  (``verl/utils/checkpoint/checkpoint_handler.py``): the ``StatefulDataLoader`` state, plain data
  and tensors.

So nothing of a verl checkpoint needs full pickle, and none is used: a file holding anything else
is refused (:class:`UnsafeCheckpointFile`), signed or not. The signature check of
:mod:`sarl.storage.signing` runs before, at download (:mod:`sarl_jobs.resume`); this is the second
wall, and the only one for installs without a checkpoint key. The HF weights verl saves beside
the shards are safetensors and never read on resume. Not covered: verl's offline tools
(``model_merger``, ``rollout_skip``), which no sarl job runs.

Called in every Ray worker process of a verl job through Ray's ``worker_process_setup_hook``
(``runtime_env``, set by :func:`sarl.integrations.verl.config.verl_overrides`; Ray 2.60.0
``ray/_private/runtime_env/setup_hook.py`` imports the named function and calls it before the
worker runs any task or actor); verl's checkpoint managers and trainers live in those processes.
"""

from __future__ import annotations

import importlib
import pickle
import types
from typing import IO, Any, Final

import numpy as np
import torch

#: The verl 0.9.1 modules that ``torch.load`` a checkpoint when a job resumes.
VERL_LOADERS: Final = (
    "verl.utils.checkpoint.fsdp_checkpoint_manager",
    "verl.utils.checkpoint.checkpoint_handler",
    "verl.trainer.ppo.v1.trainer_base",
    "verl.trainer.ppo.ray_trainer",
)
#: NumPy's RNG state: the array reconstructor, the array type, dtypes (transformers' list).
_NP_CORE: Final[Any] = getattr(np, "_core", None) or np.core  # numpy 2 renamed np.core
NUMPY_GLOBALS: Final[list[Any]] = [
    _NP_CORE.multiarray._reconstruct,
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
]


class UnsafeCheckpointFile(RuntimeError):
    """A checkpoint file holds an object the restricted unpickler does not allow."""


def safe_load(
    f: str | IO[bytes], map_location: Any = None, *args: Any, weights_only: Any = None, **kw: Any
) -> Any:
    """``torch.load`` with ``weights_only=True`` whatever the caller asked, allowing
    :data:`NUMPY_GLOBALS`; :class:`UnsafeCheckpointFile` naming the file and the global when it
    holds anything else (nothing of it runs)."""
    try:
        with torch.serialization.safe_globals(NUMPY_GLOBALS):
            return torch.load(f, map_location, *args, weights_only=True, **kw)
    except pickle.UnpicklingError as e:
        # torch names the refused global on one line ("Unsupported global: GLOBAL numpy...",
        # "Trying to load unsupported GLOBAL posix.mkdir ..."); the rest is advice to trust it.
        detail = next((ln.strip() for ln in str(e).splitlines() if "GLOBAL" in ln), "")
        raise UnsafeCheckpointFile(
            f"checkpoint file {getattr(f, 'name', f)} holds an object that loading it would have "
            f"to run code for ({detail or 'not tensors or plain data'}): refusing to load it. "
            "sarl loads verl checkpoints with torch.load(weights_only=True); a file sarl's jobs "
            "wrote never needs more, so this one was written or changed by someone else"
        ) from None


class _SafeTorch(types.ModuleType):
    """``torch`` for verl's checkpoint modules: every attribute is torch's but ``load``."""

    load = staticmethod(safe_load)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


SAFE_TORCH: Final = _SafeTorch("torch")


def install(modules: tuple[str, ...] = VERL_LOADERS) -> list[str]:
    """Make each of ``modules`` load checkpoints with :func:`safe_load`; returns their names.
    Idempotent. ImportError when one is missing: a verl other than 0.9.1 must be checked again,
    not silently left loading with full pickle."""
    patched = []
    for name in modules:
        module = importlib.import_module(name)
        if getattr(module, "torch", None) not in (torch, SAFE_TORCH):
            raise ImportError(f"{name}: has no module-level torch to guard; check its torch.load")
        module.torch = SAFE_TORCH  # type: ignore[attr-defined]
        patched.append(name)
    return patched
