"""Push verl's checkpoints to ``storage.checkpoint_uri`` after every save.

How: verl 0.9.1's v1 trainer instantiates ``trainer.checkpoint_callback_class`` on the driver
(``verl/trainer/ppo/checkpoint_callback.py``) and calls ``on_save(trainer=, global_step=,
checkpoint_dir=, async_save=)`` after each save, once ``latest_checkpointed_iteration.txt`` is
written. :func:`sarl.integrations.verl.config.verl_overrides` names :class:`StoreCheckpointCallback`
there and puts the store settings under ``sarl.storage``. The driver runs on the Ray head (rank
0), where verl's FSDP checkpoint managers write ``trainer.default_local_dir``; multi-node runs
need that directory on shared storage (each rank writes its own shards), as verl itself requires.

An upload failure raises and stops training (verl propagates it): losing checkpoints silently is
worse than a failed step. Imports no verl (duck-typed to verl's ``CheckpointCallback``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # sarl.storage imports the S3 client (the [local] extra)
    from sarl.storage.base import CheckpointStore

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
        info = store.save(global_step, Path(checkpoint_dir), {"backend": "verl"})
        logger.info("checkpoint step %d -> %s", global_step, info.uri)
        store.prune(self.keep_last)


def _select(config: Any, path: tuple[str, ...]) -> Mapping[str, Any] | None:
    node = config
    for key in path:
        if node is None or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, Mapping) or hasattr(node, "items") else None
