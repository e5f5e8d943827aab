"""The head of a multi-node verl job restores the newest checkpoint on every node, each node
only its share, once all nodes joined Ray.

Called by :mod:`sarl_jobs.verl_trainer` on node 0, after ``ray start --head``: it waits until
``nnodes`` Ray nodes are alive (up to the nodes' start-up wait, ``SARL_HEAD_WAIT_S``), reads the
store's newest complete checkpoint once, orders the nodes as verl 0.9.1 will number their ranks
(:func:`sarl_jobs.resume.verl_node_order`) and runs one Ray task pinned to each node that
downloads that node's share (:func:`sarl_jobs.resume.verl_share`: a 2-node Qwen3-4B resume
downloads ~1/2 of the shards on each node, and no HF weights, instead of the whole ~60 GB on
every node). It waits for the downloads with a deadline that scales with the largest share
(:func:`download_wait_s`) and says so in its log. Before, every worker downloaded the whole
checkpoint before it joined Ray, while the head waited a fixed 600 s for it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sarl_jobs.resume import StoreSettings, restore_verl_share, verl_node_order, verl_share

if TYPE_CHECKING:
    from sarl.storage.base import CheckpointInfo

logger = logging.getLogger(__name__)

#: Slowest object-store read a node is expected to sustain (25 MB/s, 200 Mbit/s: a shared
#: in-cluster MinIO or S3 across regions); a share that takes longer counts as stalled.
DOWNLOAD_FLOOR_BYTES_PER_S: Final = 25e6
#: Added to every download deadline: opening the store, listing, hashing small files.
DOWNLOAD_BASE_S: Final = 300.0


def download_wait_s(largest_share_bytes: int) -> float:
    """How long the head waits for the nodes' downloads: :data:`DOWNLOAD_BASE_S` plus the
    largest share at :data:`DOWNLOAD_FLOOR_BYTES_PER_S` (the nodes download in parallel)."""
    return DOWNLOAD_BASE_S + largest_share_bytes / DOWNLOAD_FLOOR_BYTES_PER_S


def wait_for_nodes(count: int, timeout_s: float, *, poll_s: float = 5.0) -> list[dict[str, Any]]:
    """The alive Ray nodes once ``count`` of them joined (``ray.init`` done by the caller);
    RuntimeError after ``timeout_s``. Logs what it waits for and, every minute, how many
    joined."""
    import ray

    logger.info("waiting up to %.0f s for %d Ray nodes to join", timeout_s, count)
    start = time.monotonic()
    last_report = start
    while len(alive := [n for n in ray.nodes() if n.get("Alive")]) < count:
        now = time.monotonic()
        if now - start > timeout_s:
            raise RuntimeError(
                f"only {len(alive)} of {count} Ray nodes joined in {timeout_s:.0f} s (the "
                "workers wait as long for this head: SARL_HEAD_WAIT_S)"
            )
        if now - last_report >= 60:
            logger.info("%d of %d Ray nodes joined after %.0f s", len(alive), count, now - start)
            last_report = now
        time.sleep(poll_s)
    logger.info("%d Ray nodes joined after %.0f s", count, time.monotonic() - start)
    return alive


def restore_on_nodes(
    settings: StoreSettings, checkpoint_dir: Path, nodes: list[dict[str, Any]], nnodes: int
) -> int | None:
    """Restore the store's newest checkpoint on every node in ``nodes`` (``ray.nodes()``
    entries), each its share; returns the step verl resumes from (None: from scratch)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    info = _latest(settings)
    addresses = [str(n["NodeManagerAddress"]) for n in nodes]
    order = verl_node_order(addresses)
    if info is not None and order is None:
        logger.warning(
            "Ray nodes share an address (%s): verl's rank order is not known in advance, so "
            "every node downloads every rank's shards",
            ", ".join(addresses),
        )
    paths = [f.path for f in info.files] if info is not None else []
    shares = [
        verl_share(paths, position=None if order is None else order[i], nnodes=nnodes)
        for i in range(len(nodes))
    ]
    task = ray.remote(num_cpus=0, max_retries=0)(_restore_share)
    refs = [
        task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(settings, str(checkpoint_dir), info, share)
        for node, share in zip(nodes, shares, strict=True)
    ]
    if info is None:
        ray.get(refs)
        return None
    sizes = {f.path: f.size for f in info.files}
    share_bytes = [sum(sizes[p] for p in share) for share in shares]
    timeout_s = download_wait_s(max(share_bytes))
    logger.info(
        "restoring step %d of %s on %d nodes: %.2f GB each at most (whole checkpoint %.2f GB); "
        "waiting up to %.0f s for their downloads",
        info.step, settings.uri, len(nodes), max(share_bytes) / 1e9, info.total_bytes / 1e9,
        timeout_s,
    )  # fmt: skip
    start = time.monotonic()
    done, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if pending:
        raise RuntimeError(
            f"{len(pending)} of {len(refs)} nodes did not download their share of step "
            f"{info.step} in {timeout_s:.0f} s (at least {DOWNLOAD_FLOOR_BYTES_PER_S / 1e6:.0f} "
            "MB/s from the store expected)"
        )
    ray.get(done)  # a node's StorageError surfaces here
    logger.info("every node restored step %d in %.0f s", info.step, time.monotonic() - start)
    return info.step


def _latest(settings: StoreSettings) -> CheckpointInfo | None:
    if not settings.uri:
        return None
    from sarl.storage import open_store

    info = open_store(settings.uri, endpoint_url=settings.endpoint_url).latest()
    if info is None:
        logger.info("no complete checkpoint in %s: training from scratch", settings.uri)
    return info


def _restore_share(
    settings: StoreSettings, checkpoint_dir: str, info: CheckpointInfo | None, share: frozenset[str]
) -> int | None:
    """On one node (a pinned Ray task): its share of ``info``."""
    logging.basicConfig(level=logging.INFO)
    return restore_verl_share(settings, Path(checkpoint_dir), info, share)
