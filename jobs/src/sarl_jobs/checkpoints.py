"""Push verl's checkpoints to ``storage.checkpoint_uri`` after every save.

How: verl 0.9.1's v1 trainer instantiates ``trainer.checkpoint_callback_class`` on the driver
(``verl/trainer/ppo/checkpoint_callback.py``) and calls ``on_save(trainer=, global_step=,
checkpoint_dir=, async_save=)`` after each save, once ``latest_checkpointed_iteration.txt`` is
written. :func:`sarl.integrations.verl.config.verl_overrides` names :class:`StoreCheckpointCallback`
there and puts the store settings under ``sarl.storage``.

Multi-node (``trainer.nnodes`` > 1): every rank's FSDP checkpoint manager writes its own shards
(``model_world_size_W_rank_R.pt`` ...) under ``trainer.default_local_dir`` on *its own* pod's
disk, and the driver (verl's ``TaskRunner``, a Ray actor on any node) writes ``data.pt`` and the
tracker on its node; no node holds the whole checkpoint. So the callback saves it in parts
(:meth:`sarl.storage.base.CheckpointStore.save_part`): one Ray task pinned to each live node
uploads that node's ``global_step_N`` directory, and only when all ``nnodes`` parts are stored
does the driver write the one manifest (``commit_parts``) — until then the step is invisible to
``latest()``. On resume :mod:`sarl_jobs.node_restore` has each node download the shards of the
ranks verl will place on it (verl numbers ranks by node address, not by pod).

Tracking (``sarl.tracking.metrics_file`` set: the job tracks a run): before each upload the
callback asks the job's own driver process (node 0, :mod:`sarl_jobs.verl_trainer`, which follows
verl's metrics file into its tracking spool) for the spool's unsent records and puts them in the
checkpoint as ``sarl-tracking-spool/`` (:func:`sarl_jobs.verl_tracking.carry_tracking`; in a
multi-node job they are in node 0's part); a resumed job adopts them. verl saves step N before
it logs step N's metrics, so checkpoint N carries the steps before N (see
:mod:`sarl_jobs.verl_tracking`). Built where that process's tracking folder is missing (the
TaskRunner placed on another node than node 0) it raises, before any training.

An upload failure raises and stops training (verl propagates it): losing checkpoints silently is
worse than a failed step; a driver that does not answer the snapshot request is only a warning
(the records stay in its spool). Imports no verl (duck-typed to verl's ``CheckpointCallback``);
Ray only in multi-node runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sarl_jobs.verl_tracking import carry_tracking, check_driver_node

if TYPE_CHECKING:  # sarl.storage imports the S3 client (the [local] extra)
    from sarl.storage.base import CheckpointInfo, CheckpointStore, FileEntry

logger = logging.getLogger(__name__)


class StoreCheckpointCallback:
    """verl checkpoint callback: upload each ``global_step_N`` directory, then prune."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        settings = _select(config, ("sarl", "storage")) or {}
        uri = settings.get("checkpoint_uri")
        self.uri: str | None = str(uri) if uri else None
        self.endpoint_url: str | None = settings.get("endpoint_url")
        self.keep_last = int(settings.get("keep_last") or 3)
        trainer = _select(config, ("trainer",)) or {}
        self.nnodes = int(trainer.get("nnodes") or 1)
        tracking = _select(config, ("sarl", "tracking")) or {}
        metrics = tracking.get("metrics_file")
        self.metrics_file: Path | None = Path(str(metrics)) if metrics else None
        if self.metrics_file is not None:
            check_driver_node(self.metrics_file)
        self._store: CheckpointStore | None = None

    @property
    def store(self) -> CheckpointStore | None:
        """The store, opened on first use (the S3 client needs the ``[local]`` extra)."""
        if self._store is None and self.uri is not None:
            from sarl.storage import open_store

            self._store = open_store(self.uri, endpoint_url=self.endpoint_url)
        return self._store

    def on_save(
        self,
        trainer: Any = None,
        global_step: int = 0,
        checkpoint_dir: str = "",
        async_save: bool = False,
        **kwargs: Any,
    ) -> None:
        store = self.store
        if store is None:
            return
        if async_save:  # Megatron only; FSDP saves synchronously
            logger.warning("step %d saved asynchronously; not uploaded", global_step)
            return
        if self.metrics_file is not None:
            try:
                carry_tracking(self.metrics_file, global_step, Path(checkpoint_dir))
            except Exception as e:  # the checkpoint matters more than its tracking tail
                logger.warning("checkpoint step %d carries no tracking records: %s", global_step, e)
        if self.nnodes > 1:
            info = self._save_in_parts(store, global_step, checkpoint_dir)
        else:
            info = store.save(global_step, Path(checkpoint_dir), {"backend": "verl"})
        logger.info("checkpoint step %d -> %s", global_step, info.uri)
        store.prune(self.keep_last)

    def _save_in_parts(
        self, store: CheckpointStore, global_step: int, checkpoint_dir: str
    ) -> CheckpointInfo:
        """Each live Ray node uploads its ``checkpoint_dir`` (the same path on every pod); the
        manifest is written once all ``nnodes`` parts are stored."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
        if len(nodes) != self.nnodes:  # a node's shards would be missing from the checkpoint
            raise RuntimeError(
                f"checkpoint step {global_step}: {len(nodes)} live Ray nodes, trainer.nnodes="
                f"{self.nnodes}; not uploading an incomplete checkpoint"
            )
        store.begin_parts(global_step)
        upload = ray.remote(num_cpus=0, max_retries=0)(upload_part)
        refs = [
            upload.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote(self.uri, self.endpoint_url, global_step, checkpoint_dir)
            for node in nodes
        ]
        parts = ray.get(refs)
        meta = {"backend": "verl", "parts": len(parts)}
        return store.commit_parts(global_step, parts, meta)


def upload_part(
    uri: str, endpoint_url: str | None, step: int, checkpoint_dir: str
) -> tuple[FileEntry, ...]:
    """One node's part of checkpoint ``step`` (runs as a Ray task pinned to that node; the
    store's credentials come from the pod's environment, which the raylet passes on)."""
    from sarl.storage import open_store

    store = open_store(uri, endpoint_url=endpoint_url)
    return store.save_part(step, Path(checkpoint_dir))


def _select(config: Any, path: tuple[str, ...]) -> Mapping[str, Any] | None:
    node = config
    for key in path:
        if node is None or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, Mapping) or hasattr(node, "items") else None
