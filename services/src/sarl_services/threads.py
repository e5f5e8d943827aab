"""How many CPU threads the embedding model's forward passes use, and why.

Called once by :meth:`sarl_services.embedding.EmbeddingModel.load` (and by the embedding
benchmark, to measure the in-process ceiling with the same settings), before the model loads.

The count sizes both backends of :mod:`sarl.embedding.encoders`: torch's intra-op pool, and
for ONNX Runtime the number of single-threaded calls run at once.

* **intra-op threads = the cores this process may use**: its CPU affinity
  (``os.sched_getaffinity``), capped by the cgroup CPU quota rounded up (a Kubernetes CPU
  limit). torch's own default is the number of *physical cores of the host*: in a pod limited
  to 2 CPUs on a 64-core node that is 64 OpenMP threads taking turns on 2 CPUs of quota; every
  parallel region then waits for its slowest, descheduled thread, and the pod is throttled.
  ``--torch-threads`` overrides it (e.g. 1 when other busy processes share the same cores).
* **inter-op threads = 1**: the model is called from a single worker thread
  (:mod:`sarl_services.batching`) and a BERT forward pass issues its ops one after another, so
  an inter-op pool only adds idle threads that compete with the intra-op ones (ONNX Runtime
  sessions get one intra-op and one inter-op thread each: the encoder runs calls side by side
  instead).
* **tokenizers single-threaded** (``TOKENIZERS_PARALLELISM=false``): requests are tokenized
  (their ids are what the model then runs) on their own thread *while* a forward pass already
  has every core; the Rust tokenizer's thread pool would size itself to the host's cores.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _v2_limit(path: Path) -> float | None:
    """``quota / period`` from a cgroup v2 ``cpu.max`` ("max 100000" means no limit)."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def cgroup_cpu_limit(root: Path = _CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (e.g. 2.0), or None without one.

    cgroup v2: the smallest ``cpu.max`` from the process's own cgroup up to the root (inside a
    container the namespace's root is the container's cgroup). cgroup v1: ``cpu.cfs_quota_us``
    / ``cpu.cfs_period_us`` of the mounted hierarchy.
    """
    limits: list[float] = []
    try:
        own = next(
            line.split(":", 2)[2]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
    except (OSError, StopIteration):  # not Linux, or cgroup v1 only
        own = "/"
    directory = root / own.strip().lstrip("/")  # cgroup v2
    while True:
        limit = _v2_limit(directory / "cpu.max")
        if limit is not None:
            limits.append(limit)
        if directory == root or root not in directory.parents:
            break
        directory = directory.parent
    try:  # cgroup v1
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:
            limits.append(quota / period)
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


def usable_cores() -> int:
    """The cores this process may use: its affinity, capped by a cgroup quota (rounded up)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


def configure_threads(requested: int | None) -> int:
    """Set torch's intra-op threads (``requested``, else :func:`usable_cores`), one inter-op
    thread and single-threaded tokenizers; return the intra-op count."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    threads = requested if requested is not None else usable_cores()
    torch.set_num_threads(threads)
    # RuntimeError: set before, or inter-op work already ran in this process; keep that.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    return threads
