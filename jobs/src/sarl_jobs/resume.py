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
in a single-node job; in a multi-node one the store's always does (``local_wins=False``).
With no URI configured, or an empty store, training starts from scratch; a store that cannot be
read raises :class:`sarl.storage.StorageError` (starting over silently would overwrite the run's
progress with step 1 again).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sarl.spec.experiment import Experiment

logger = logging.getLogger(__name__)

VERL_TRACKER: Final = "latest_checkpointed_iteration.txt"
_TRL_DIR: Final = re.compile(r"^checkpoint-(\d+)$")


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
