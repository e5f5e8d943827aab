"""The reasoning map of one response and its small-world statistics (SARL v2 §3.2–3.3).

Called by the structure scorer and the reasoning-map picture. Maps are tiny (k ≈ sqrt(M) nodes
for KMeans), so the statistics use plain Python sets and breadth-first search, which costs a few
microseconds where building a networkx graph costs ~100x more; tests check equality with
networkx on random maps. The batch scorer builds the maps of many same-length walks at once
with numpy (:func:`build_maps`, :func:`map_statistics`), equal to the one-map functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class ReasoningMap:
    """Undirected graph: nodes are the clusters present, edges the distinct transitions.

    ``node_sizes[k]`` is how many steps node k holds; ``edges`` are (u < v) pairs in order of
    first traversal; ``walk`` is the node of each step in step order (for drawing).
    """

    num_nodes: int
    edges: tuple[tuple[int, int], ...]
    node_sizes: tuple[int, ...]
    walk: tuple[int, ...]

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    def neighbors(self) -> list[set[int]]:
        """Adjacency sets, one per node; no self-loops."""
        adj: list[set[int]] = [set() for _ in range(self.num_nodes)]
        for u, v in self.edges:
            adj[u].add(v)
            adj[v].add(u)
        return adj

    def to_node_link(self) -> dict[str, Any]:
        """networkx-compatible node-link JSON (``nx.node_link_graph(data, edges="edges")``)."""
        return {
            "directed": False,
            "multigraph": False,
            "graph": {"walk": list(self.walk)},
            "nodes": [{"id": k, "steps": n} for k, n in enumerate(self.node_sizes)],
            "edges": [{"source": u, "target": v} for u, v in self.edges],
        }


def build_map(labels: Sequence[int]) -> ReasoningMap:
    """Build the map from per-step cluster labels (any ints >= 0).

    Nodes are renumbered 0..K-1 by first appearance. An edge joins the clusters of consecutive
    steps when they differ (Alg. 1 line 8); repeated transitions give one edge; equal
    consecutive clusters give no self-loop.
    """
    ids: dict[int, int] = {}
    walk: list[int] = []
    for raw in labels:
        label = int(raw)
        if label < 0:
            raise ValueError(f"labels: cluster ids must be >= 0, got {label}")
        walk.append(ids.setdefault(label, len(ids)))
    sizes = [0] * len(ids)
    for node in walk:
        sizes[node] += 1
    edges: dict[tuple[int, int], None] = {}
    for a, b in pairwise(walk):
        if a != b:
            edges.setdefault((a, b) if a < b else (b, a), None)
    return ReasoningMap(
        num_nodes=len(ids), edges=tuple(edges), node_sizes=tuple(sizes), walk=tuple(walk)
    )


def clustering_coefficient(neighbors: Sequence[set[int]]) -> float:
    """C(G) of SARL v2 eq. (4): mean local clustering over nodes with degree >= 2 only.

    Nodes with fewer than two neighbours are left out of the mean (networkx's
    ``average_clustering`` counts them as 0 instead). No such node: C = 0.
    """
    total = 0.0
    count = 0
    for nbrs in neighbors:
        d = len(nbrs)
        if d < 2:
            continue
        # Each edge among the neighbours is seen from both ends, hence the // 2.
        links = sum(len(nbrs & neighbors[u]) for u in nbrs) // 2
        total += links / (d * (d - 1) / 2)
        count += 1
    return total / count if count else 0.0


def average_path_length(neighbors: Sequence[set[int]]) -> float | None:
    """L(G) of SARL v2 eq. (5): mean hop distance over ordered reachable pairs of distinct nodes.

    Breadth-first search from every node. Returns None when there is no reachable pair (fewer
    than two nodes, or no edges): the mean is empty and eq. (5) undefined.
    """
    total = 0
    pairs = 0
    for source in range(len(neighbors)):
        seen = {source}
        frontier = [source]
        hop = 0
        while frontier:
            hop += 1
            nxt = [v for u in frontier for v in neighbors[u] if v not in seen]
            nxt = list(dict.fromkeys(nxt))
            seen.update(nxt)
            total += hop * len(nxt)
            pairs += len(nxt)
            frontier = nxt
    return total / pairs if pairs else None


# --- many walks at once (the batch scorer) ---


def build_maps(walks: npt.NDArray[np.int64]) -> list[ReasoningMap]:
    """:func:`build_map` of each row of (B, M) canonical walks (ids numbered 0, 1, ... by first
    appearance, as KMeans returns them), M >= 1; equal maps, built with a few numpy calls."""
    b = walks.shape[0]
    nodes = walks.max(axis=1) + 1  # (B,)
    kk = int(nodes.max())
    a, c = walks[:, :-1], walks[:, 1:]
    # Edge (u < v) as one code; -1 where consecutive steps share a node. An edge's first
    # traversal is the first of its equal codes in a stable sort of the row.
    code = np.where(a != c, np.minimum(a, c) * kk + np.maximum(a, c), -1)  # (B, M - 1)
    order = np.argsort(code, axis=1, kind="stable")
    ranked = np.take_along_axis(code, order, axis=1)
    new = ranked >= 0
    new[:, 1:] &= ranked[:, 1:] != ranked[:, :-1]
    first = np.zeros_like(new)
    np.put_along_axis(first, order, new, axis=1)
    rows, cols = np.nonzero(first)  # row by row, in step order
    codes = code[rows, cols]
    pairs = list(zip((codes // kk).tolist(), (codes % kk).tolist(), strict=True))
    ends = np.cumsum(first.sum(axis=1)).tolist()
    sizes = np.bincount((walks + kk * np.arange(b)[:, None]).ravel(), minlength=b * kk)
    size_rows = sizes.reshape(b, kk).tolist()
    out = []
    start = 0
    for walk, n, end, size in zip(walks.tolist(), nodes.tolist(), ends, size_rows, strict=True):
        out.append(
            ReasoningMap(
                num_nodes=n,
                edges=tuple(pairs[start:end]),
                node_sizes=tuple(size[:n]),
                walk=tuple(walk),
            )
        )
        start = end
    return out


def map_statistics(
    walks: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """C (eq. 4) and L (eq. 5, NaN where :func:`average_path_length` gives None) of the maps of
    (B, M) canonical walks, bit for bit as :func:`clustering_coefficient` and
    :func:`average_path_length` compute them: the same integer counts, the same float
    operations in the same order (C sums node by node; L divides two exact integers)."""
    b = walks.shape[0]
    kk = int(walks.max()) + 1
    adj = np.zeros((b, kk, kk), dtype=np.int64)
    a, c = walks[:, :-1], walks[:, 1:]
    step = a != c
    row = np.nonzero(step)[0]
    adj[row, a[step], c[step]] = 1
    adj[row, c[step], a[step]] = 1
    deg = adj.sum(axis=2)  # (B, K)
    links = ((adj @ adj) * adj).sum(axis=2) // 2  # edges among each node's neighbours
    counted = deg >= 2
    pairs = np.where(counted, deg * (deg - 1) / 2, 1.0)
    local = np.where(counted, links / pairs, 0.0)  # (B, K)
    total = np.zeros(b)
    for v in range(kk):  # node order, as the loop in clustering_coefficient (+ 0.0 is exact)
        total = total + local[:, v]
    count = counted.sum(axis=1)
    clustering = np.where(count > 0, total / np.maximum(count, 1), 0.0)
    # Breadth-first search from every node at once: nodes first reached at hop h.
    reached = np.broadcast_to(np.eye(kk, dtype=bool), (b, kk, kk)).copy()
    hops = np.zeros(b, dtype=np.int64)
    reachable = np.zeros(b, dtype=np.int64)
    for h in range(1, kk):
        nxt = ((reached.astype(np.int64) @ adj) > 0) & ~reached
        found = nxt.sum(axis=(1, 2))
        if not found.any():
            break
        hops += h * found
        reachable += found
        reached |= nxt
    path = np.full(b, np.nan)
    np.divide(hops, reachable, out=path, where=reachable > 0)
    return clustering, path
