"""torch's intra-op thread count for a stretch of work: :func:`one_torch_thread`.

Called by the built-in policy's warm start (:mod:`sarl.runner.tiny`), which the local runner and
the local Study runner prepare before any RL step. torch is imported inside (the sdk core has no
torch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch's intra-op threads set to 1 inside, restored after.

    The built-in policy's matrices are tiny (hidden size 64 by default): a second thread saves
    little on an idle 2-core machine, and on a busy one its barrier waits burn CPU. Measured on
    a shared 2-core machine (load 8-14) for 200 SFT steps of the demo's policy: 10 CPU-seconds
    (74 s) with 1 thread; with 2, 72 CPU-seconds spent and still unfinished after 386 s; the
    demo's 1,000 steps at 2 threads burnt 0.45 CPU-seconds a step (issue 40 item 9). Nearly
    idle (load 1), the 1,000 steps took 35 s and 35 CPU-seconds on 1 thread, 26 s and 48 on 2:
    the second thread would save 9 s there."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


__all__ = ["one_torch_thread"]
