"""Checkpoint storage for experiment runs: a local directory or an S3/MinIO prefix.

The local experiment runner opens a store from ``storage.checkpoint_uri`` with
:func:`open_store`, calls ``check_access()`` before training, ``clean_leftovers()`` when a run
starts, ``save(step, dir, metadata)`` every ``storage.every_n_steps`` and at the end,
``prune(storage.keep_last)`` after each save, and on ``--resume`` ``latest()`` + ``download()``.
A checkpoint is complete only once its manifest is written (last); see :mod:`sarl.storage.base`
for the rules. No torch imports: stores move files.
"""

from sarl.storage.base import (
    CheckpointInfo,
    CheckpointRefused,
    CheckpointStore,
    FileEntry,
    StorageError,
)
from sarl.storage.factory import open_store, parse_s3_uri
from sarl.storage.local import LocalCheckpointStore
from sarl.storage.s3 import S3CheckpointStore

__all__ = [
    "CheckpointInfo",
    "CheckpointRefused",
    "CheckpointStore",
    "FileEntry",
    "LocalCheckpointStore",
    "S3CheckpointStore",
    "StorageError",
    "open_store",
    "parse_s3_uri",
]
