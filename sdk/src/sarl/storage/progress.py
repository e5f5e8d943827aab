"""Progress of one checkpoint transfer (save, download, part upload): a byte counter drawn as a
bar only for a person watching.

Used by the stores (:mod:`sarl.storage.base`, ``local``, ``s3``) around every transfer.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType


def show_progress() -> bool:
    """Progress bars only for a person watching: a TTY, and not switched off."""
    return sys.stderr.isatty() and not os.environ.get("SARL_NO_PROGRESS")


class Progress:
    """Byte counter for one save/download, drawn as a tqdm bar when :func:`show_progress`.

    Also satisfies minio's ``ProgressType`` protocol (``set_meta``/``update``), so the S3 store
    hands it straight to ``fput_object``. ``delay`` keeps small checkpoints from drawing a bar.
    """

    def __init__(self, total: int, desc: str) -> None:
        from sarl.progress import progress_bar

        self._bar = progress_bar(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            enabled=show_progress(),
            delay=1.0,
            leave=False,
        )

    def set_meta(self, object_name: str, total_length: int) -> None:
        """Called by minio per object; ignored because the bar counts the whole checkpoint."""

    def update(self, length: int) -> None:
        self._bar.update(length)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.close()
