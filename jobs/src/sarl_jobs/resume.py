"""Resume a cluster training job from the newest complete checkpoint in the store.

Called at start-up by :mod:`sarl_jobs.verl_trainer` (on the driver, rank 0; in multi-node jobs
on every node, before it joins Ray, since each rank loads its shards from its own disk) and
:mod:`sarl_jobs.trl_trainer` (local rank 0 of every node). A PyTorchJob pod that restarts (node
lost, preempted, OOM-killed) or an Experiment that is re-created with the same
``storage.checkpoint_uri`` comes back with an empty local disk; the store is what survived. The
newest complete checkpoint (manifest present and every file verified, see
:mod:`sarl.storage.base`) is downloaded into the layout the trainer itself resumes from:

* verl: ``<checkpoint_dir>/global_step_<N>/`` plus ``latest_checkpointed_iteration.txt``, read by
  verl's ``trainer.resume_mode=auto`` (``RayPPOTrainer._load_checkpoint``);
* TRL: ``<output_dir>/checkpoint-<N>/``, passed to ``Trainer.train(resume_from_checkpoint=...)``.

A newer checkpoint already on local disk (a container restarted in place) wins over the store's
in a single-node job; in a multi-node one the store's always does (``local_wins=False``), and
each node of a verl job downloads only its share (:func:`verl_share`: the shards of the ranks
verl places on it, not the HF weights), dispatched by the head (:mod:`sarl_jobs.node_restore`).
With no URI configured, or an empty store, training starts from scratch; a store that cannot be
read raises :class:`sarl.storage.StorageError` (starting over silently would overwrite the run's
progress with step 1 again).

Signed checkpoints (issue 36): with the namespace's ``SARL_CHECKPOINT_KEY`` in the pod's
environment (the operator sets it from the Secret ``sarl-tenant``) the store refuses a newest
checkpoint whose manifest is unsigned, signed with another namespace's key or changed after
signing, and a file whose bytes do not match the manifest
(:class:`sarl.storage.CheckpointRefused`), before any file reaches the directory the trainer
loads from. The refusal fails the job, naming the checkpoint: neither an older checkpoint nor
step 0 is used instead (either would hide a planted checkpoint and silently undo the run's
progress). A checkpoint already on this node's scratch disk (written by this pod, or downloaded
and verified before a container restart) is not verified again: only this pod writes there.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sarl.spec.experiment import Experiment

if TYPE_CHECKING:  # sarl.storage imports the S3 client (the [local] extra)
    from sarl.storage.base import CheckpointInfo

logger = logging.getLogger(__name__)

VERL_TRACKER: Final = "latest_checkpointed_iteration.txt"
_TRL_DIR: Final = re.compile(r"^checkpoint-(\d+)$")
#: verl 0.9.1's per-rank FSDP files (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``,
#: ``save_checkpoint``/``load_checkpoint``): rank ``r`` of world size ``W`` loads only its own.
_RANK_FILE: Final = re.compile(
    r"(?:^|/)(?:model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$"
)
#: The full HF model verl may save beside the shards (``save_contents: [hf_model]``, under
#: ``<role>/huggingface/``): for serving and export; ``load_checkpoint`` never reads it.
_HF_WEIGHTS: Final = re.compile(r"(?:^|/)huggingface/.*\.(?:safetensors|bin)$")


@dataclass(frozen=True)
class StoreSettings:
    """Where this job's checkpoints go: the operator's ``SARL_CHECKPOINT_URI`` (the platform
    bucket default) or ``spec.storage.checkpoint_uri``; the spec's endpoint or ``AWS_ENDPOINT_URL``
    (set by the operator from the platform's S3 endpoint)."""

    uri: str | None
    endpoint_url: str | None
    keep_last: int

    @classmethod
    def resolve(cls, exp: Experiment, environ: Mapping[str, str]) -> StoreSettings:
        storage = exp.spec.storage
        return cls(
            uri=environ.get("SARL_CHECKPOINT_URI") or storage.checkpoint_uri or None,
            endpoint_url=storage.endpoint_url or environ.get("AWS_ENDPOINT_URL") or None,
            keep_last=storage.keep_last,
        )


def _local_verl_step(checkpoint_dir: Path) -> int | None:
    tracker = checkpoint_dir / VERL_TRACKER
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    return step if (checkpoint_dir / f"global_step_{step}").is_dir() else None


#: Written last by transformers' ``Trainer._save_checkpoint`` (after the model, optimizer,
#: scheduler and RNG states; transformers 5.24.0 ``trainer.py``): a ``checkpoint-N`` without it is
#: a save cut short, which the scratch volume keeps across a container restart.
TRL_COMPLETE_MARKER = "trainer_state.json"


def _local_trl_step(output_dir: Path) -> int | None:
    """The step of the newest complete ``checkpoint-N`` on this node's disk."""
    steps = [
        int(m.group(1))
        for p in (output_dir.iterdir() if output_dir.is_dir() else [])
        if p.is_dir() and (m := _TRL_DIR.match(p.name)) and (p / TRL_COMPLETE_MARKER).is_file()
    ]
    return max(steps, default=None)


def local_trl_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` directory on this node's disk, if any."""
    step = _local_trl_step(output_dir)
    return output_dir / f"checkpoint-{step}" if step is not None else None


def restore_verl(
    settings: StoreSettings, checkpoint_dir: Path, *, local_wins: bool = True
) -> int | None:
    """Download the store's newest checkpoint for verl's ``resume_mode=auto``; returns the step
    verl will resume from (None: from scratch).

    ``local_wins=False`` (multi-node jobs, called on every node): the store is the only complete
    copy — a node's own disk holds at most its ranks' shards, and the tracker only where the
    driver ran — so the store's checkpoint is always downloaded, whole, and without one any
    local tracker is removed (verl then starts from scratch on every node alike).
    """
    local = _local_verl_step(checkpoint_dir) if local_wins else None
    remote = _latest_remote(settings)
    if not local_wins and remote is None:
        (checkpoint_dir / VERL_TRACKER).unlink(missing_ok=True)
        return None
    if remote is None or (local is not None and local >= remote[0]):
        if local is not None:
            logger.info("resuming verl from local step %d in %s", local, checkpoint_dir)
        return local
    step, download = remote
    download(checkpoint_dir / f"global_step_{step}")
    (checkpoint_dir / VERL_TRACKER).write_text(str(step))
    logger.info("resuming verl from step %d of %s", step, settings.uri)
    return step


def verl_node_order(addresses: Sequence[str]) -> list[int] | None:
    """Each node's position in verl's rank order, by the Ray node address of ``addresses[i]``;
    None where two nodes share an address (the order is then not knowable in advance).

    verl 0.9.1 places its FSDP workers on placement groups sorted by node IP
    (``verl/single_controller/ray/base.py``, ``sort_placement_group_by_node_ip``: the string of
    ``NodeManagerAddress``, one group of ``n_gpus_per_node`` bundles per node) and numbers ranks
    in that order, so the node with the k-th smallest address runs ranks ``k*G .. k*G+G-1``.
    """
    if len(set(addresses)) != len(addresses):
        return None
    ordered = sorted(addresses)
    return [ordered.index(a) for a in addresses]


def verl_share(paths: Iterable[str], *, position: int | None, nnodes: int) -> frozenset[str]:
    """The files of a verl checkpoint that the node at ``position`` (in verl's rank order,
    :func:`verl_node_order`) of ``nnodes`` needs to resume: its ranks' ``model_*``, ``optim_*``
    and ``extra_state_*`` shards (world size ``W``: ranks ``position*W/nnodes`` up to the
    next node's), and every file that is not a rank's (``data.pt``, configs, tokenizer, the
    tracking spool) — but not the HF weights under ``huggingface/``, which resuming never reads.
    ``position`` None (order unknown) or a world size that ``nnodes`` does not divide: every
    rank's shards."""
    out = set()
    for path in paths:
        if _HF_WEIGHTS.search(path):
            continue
        match = _RANK_FILE.search(path)
        if match and position is not None:
            world, rank = int(match.group(1)), int(match.group(2))
            if world % nnodes == 0 and rank // (world // nnodes) != position:
                continue
        out.add(path)
    return frozenset(out)


def restore_verl_share(
    settings: StoreSettings,
    checkpoint_dir: Path,
    info: CheckpointInfo | None,
    share: Collection[str],
) -> int | None:
    """Multi-node verl, on one node: download the files ``share`` of ``info`` (the head's pick
    of the store's newest checkpoint, the same for every node) as ``global_step_<N>`` and write
    the tracker; returns N. ``info`` None: no checkpoint, so any local tracker is removed (every
    node then starts from scratch alike)."""
    if info is None:
        (checkpoint_dir / VERL_TRACKER).unlink(missing_ok=True)
        return None
    from sarl.storage import open_store

    store = open_store(str(settings.uri), endpoint_url=settings.endpoint_url)
    part = [f for f in info.files if f.path in share]
    dest = checkpoint_dir / f"global_step_{info.step}"
    shutil.rmtree(dest, ignore_errors=True)  # an older or partial copy: the store's wins
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The whole manifest is what was signed: the store verifies it, then fetches the share.
    store.download(info, dest, only=share)
    (checkpoint_dir / VERL_TRACKER).write_text(str(info.step))
    logger.info(
        "resuming verl from step %d of %s: %d of %d files, %.2f of %.2f GB on this node",
        info.step, settings.uri, len(part), len(info.files),
        sum(f.size for f in part) / 1e9, info.total_bytes / 1e9,
    )  # fmt: skip
    return info.step


def restore_trl(
    settings: StoreSettings, output_dir: Path, *, local_wins: bool = True
) -> Path | None:
    """Download the store's newest checkpoint as ``checkpoint-<N>``; returns the directory to
    resume from (None: from scratch).

    ``local_wins=False`` (multi-node jobs, called on every node): the store is the only complete
    copy — transformers writes the model, optimizer and trainer state on global rank 0 only, so
    another node's ``checkpoint-<N>`` holds just its RNG states, and a node whose container was
    killed mid-save keeps a half-written one (the scratch volume survives a container restart
    in the same pod) — so the store's checkpoint is always downloaded, whole, and every other
    local ``checkpoint-*`` is removed (without one in the store, all of them: every node then
    starts from scratch alike, and the node's other processes, which look for the newest local
    directory, find the same one).
    """
    local = _local_trl_step(output_dir) if local_wins else None
    remote = _latest_remote(settings)
    if not local_wins:
        keep = output_dir / f"checkpoint-{remote[0]}" if remote is not None else None
        for stale in output_dir.iterdir() if output_dir.is_dir() else []:
            if stale != keep and stale.is_dir() and _TRL_DIR.match(stale.name):
                logger.info("removing local %s: the store's checkpoint wins", stale)
                shutil.rmtree(stale)
        if remote is None:
            return None
    if remote is None or (local is not None and local >= remote[0]):
        return local_trl_checkpoint(output_dir)
    step, download = remote
    dest = output_dir / f"checkpoint-{step}"
    download(dest)
    logger.info("resuming TRL from step %d of %s", step, settings.uri)
    return dest


def _latest_remote(settings: StoreSettings) -> tuple[int, Callable[[Path], None]] | None:
    if not settings.uri:
        return None
    from sarl.storage import open_store

    store = open_store(settings.uri, endpoint_url=settings.endpoint_url)
    info = store.latest()
    if info is None:
        logger.info("no complete checkpoint in %s: training from scratch", settings.uri)
        return None

    def download(dest: Path) -> None:
        # Anything already at dest is an unfinished local save (not the newest local checkpoint,
        # or we would not download): replace it.
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        store.download(info, dest)

    return info.step, download
