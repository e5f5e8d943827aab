"""Per-response clustering of step embeddings into latent reasoning functions (SARL v2 §3.2, A.1).

Called by the structure scorer (``scorer.py``) per bucket of same-length responses (or once per
response), possibly in worker processes.

* KMeans: k = round(sqrt(M)) clamped to [1, M]; KMeans++ seeding with a fixed seed, then Lloyd
  iterations. Because step embeddings are unit-normalised and M is small (tens of steps) while
  the dimension is large (384–4096), the whole algorithm runs on the M x M Gram matrix
  ("kernel" form of Lloyd's algorithm): exact same partitions as Lloyd in input space, but each
  iteration costs O(M^2 k) instead of O(M k d), and there is no per-call library overhead
  (the Gram matrices: :mod:`sarl.rewards.structure.grams`).
  A bucket's responses and their restarts run as rows of one batch, chunk by chunk; each row's
  result is the one it gets alone (issue 26 made this path ~1.5-2x faster with bit-identical
  results: ``tests/sarl/rewards/structure/test_identity.py``).
* HDBSCAN: scikit-learn's implementation with the paper's settings and a choice of noise policy.

Labels are returned in canonical form: clusters numbered 0, 1, ... by first appearance in step
order, so equal partitions give equal label lists whatever the algorithm's internal numbering.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.grams import (
    FloatMatrix,
    _safe_scale,
    _squared_distances,
    _unit_grams,
    unit_grams,
)

IntArray = npt.NDArray[np.int64]


def canonical_labels(labels: npt.ArrayLike) -> IntArray:
    """Renumber cluster ids 0, 1, 2, ... in order of first appearance."""
    arr = np.asarray(labels)
    _, first_index, inverse = np.unique(arr, return_index=True, return_inverse=True)
    rank = np.empty(first_index.size, dtype=np.int64)
    rank[np.argsort(first_index, kind="stable")] = np.arange(first_index.size)
    return rank[inverse.reshape(-1)]


def kmeans_k(num_steps: int) -> int:
    """The paper's k ≈ sqrt(M), as round(sqrt(M)) clamped to [1, M] (A.1)."""
    return min(max(1, round(math.sqrt(num_steps))), max(num_steps, 1))


# Responses clustered together: enough rows that numpy's per-call cost is spread thin, few enough
# that the chunk's arrays (Gram and distance matrices, restarts' one-hot and distance blocks) stay
# in cache and small allocations are reused instead of mapped afresh (page faults cost more than
# the arithmetic at paper scale).
_CHUNK_BYTES = 1 << 20


def _chunk_size(m: int, k: int, n_init: int) -> int:
    """Responses per chunk for M steps, k clusters and ``n_init`` restarts."""
    return max(1, _CHUNK_BYTES // (8 * m * max(m, n_init * k)))


class _Scratch(threading.local):
    """Per-thread buffers for a chunk's (B, M, M) arrays, kept from one chunk (and call) to the
    next: fresh arrays of this size are mapped and faulted in page by page on every chunk, which
    cost more than the arithmetic on them. At most three buffers of ``_SCRATCH_KEEP_BYTES`` per
    thread that clusters; a larger chunk (one response of over ~700 steps) gets fresh arrays."""

    def __init__(self) -> None:
        self.buffers: dict[str, FloatMatrix] = {}

    def take(self, name: str, shape: tuple[int, ...]) -> FloatMatrix:
        """A (B, M, M) view of the buffer ``name``, contents undefined; valid until the next
        ``take`` of that name in this thread."""
        size = math.prod(shape)
        if size * 8 > _SCRATCH_KEEP_BYTES:
            return np.empty(shape)
        buf = self.buffers.get(name)
        if buf is None or buf.size < size:
            buf = self.buffers[name] = np.empty(size)
        return buf[:size].reshape(shape)


_SCRATCH_KEEP_BYTES = 4 * _CHUNK_BYTES


_SCRATCH = _Scratch()


class _Draws:
    """The random numbers of KMeans++ seedings, restart after restart, from one generator.

    Restart r takes a first centre, then ``2 + floor(ln k)`` uniforms per further centre — the
    order in which a loop over restarts seeding the whole bucket draws them. Drawing them
    up front lets all restarts of all responses run as rows of one batch.
    """

    def __init__(self, seed: int, m: int, k: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.m, self.k = m, k
        self.trials = 2 + int(math.log(k))
        self.states: list[Any] = []

    def draw(self, n: int) -> tuple[IntArray, FloatMatrix]:
        """``n`` more restarts: first centres (n,) and candidate uniforms (n, k - 1, T)."""
        first = np.empty(n, dtype=np.int64)
        draws = np.empty((n, self.k - 1, self.trials))
        for r in range(n):
            self.states.append(self.rng.bit_generator.state)
            first[r] = self.rng.integers(self.m)
            for c in range(self.k - 1):
                draws[r, c] = self.rng.random(self.trials)
        return first, draws

    def rewind(self, restart: int, rounds: int) -> None:
        """Put the generator where it stands after ``restart`` drew only ``rounds`` rounds."""
        self.rng.bit_generator.state = self.states[restart]
        del self.states[restart + 1 :]
        self.rng.integers(self.m)
        for _ in range(rounds):
            self.rng.random(self.trials)


def _kmeans_pp(
    d2: FloatMatrix, k: int, first: IntArray, draws: FloatMatrix
) -> tuple[IntArray, IntArray]:
    """Greedy KMeans++ seeding (Arthur & Vassilvitskii 2007) of R restarts of B responses.

    ``d2`` is (B, M, M); restart r starts from point ``first[r]`` and draws its candidates with
    ``draws[r]`` (k - 1, T). As in scikit-learn, each new centre is the best of T = 2 +
    floor(ln k) candidates drawn with probability proportional to D^2. Every response of a
    restart uses the same numbers, exactly as if it were seeded alone, so a response's labels
    never depend on its batch. A response stops adding centres when every point coincides with
    a centre (fewer distinct points than k); its missing centres are -1. Returns the centres'
    point indices (R, B, k) and, per restart, the rounds of draws a loop over these responses
    would use: k - 1, or the round at which none of them has a point left to add.
    """
    b, m, _ = d2.shape
    n = first.shape[0] * b  # rows: restart-major
    src = np.tile(np.arange(b), first.shape[0])  # (N,) the response of each row
    rows = np.arange(n)
    centers = np.full((n, k), -1, dtype=np.int64)
    centers[:, 0] = np.repeat(first, b)
    closest = d2[src, centers[:, 0]]  # (N, M) squared distance to the nearest centre
    row_draws = np.repeat(draws, b, axis=0)  # (N, k - 1, T)
    used = np.full(n, k - 1)  # the round at which a row had nothing left to add
    for c in range(1, k):
        total = closest.sum(axis=1)  # (N,)
        active = total > 0.0
        everyone = bool(active.all())
        if not everyone:
            np.minimum(used, np.where(active, k - 1, c), out=used)
            if not active.any():
                break
        cumulative = np.cumsum(closest, axis=1)  # (N, M)
        thresholds = row_draws[:, c - 1] * total[:, None]  # (N, T)
        # searchsorted per row, side='left': number of cumulative values below the threshold.
        cand = (cumulative[:, None, :] < thresholds[:, :, None]).sum(axis=2)
        np.minimum(cand, m - 1, out=cand)  # (N, T)
        trial = d2[src[:, None], cand]  # (N, T, M)
        np.minimum(closest[:, None, :], trial, out=trial)
        best = np.argmin(trial.sum(axis=2), axis=1)  # (N,)
        if everyone:
            centers[:, c] = cand[rows, best]
            closest = trial[rows, best]
        else:
            centers[active, c] = cand[rows, best][active]
            closest[active] = trial[rows, best][active]
    return centers.reshape(-1, b, k), used.reshape(-1, b).max(axis=1)


def _lloyd(
    gram: FloatMatrix, labels: IntArray, valid: npt.NDArray[np.bool_], max_iter: int
) -> tuple[IntArray, npt.NDArray[np.float64]]:
    """Lloyd iterations in kernel form for R restarts of B responses.

    ``gram`` (B, M, M), start ``labels`` (R, B, M), ``valid`` (R, B, k) marks clusters that
    exist (a row with fewer distinct points has fewer). Returns labels (R, B, M) and inertia
    (R, B). With Z the (M, k) one-hot assignment and n_c the cluster sizes, the squared distance
    of point i to the mean of cluster c is G_ii - 2 (G Z)_ic / n_c + (Z^T G Z)_cc / n_c^2.
    A row whose labels an iteration keeps is at a fixed point (more iterations repeat it), so
    each row's result is the one it would get alone. The first iteration shares each G between
    a response's restarts; then the rows still moving are gathered.
    """
    r, b, m = labels.shape
    k = valid.shape[2]
    n = r * b
    labels, ok = labels.reshape(n, m), valid.reshape(n, k)
    out = labels.copy()
    own = np.zeros((n, m))  # squared distance of each point to its cluster's mean
    src = np.tile(np.arange(b), r)  # (N,) the response of each row
    left = np.arange(n)  # rows still iterating
    g: FloatMatrix | None = None  # the moving rows' Gram matrices once gathered
    diag = np.diagonal(gram, axis1=1, axis2=2)[src]  # (N, M)
    for it in range(max_iter):
        a = left.size
        onehot = np.zeros((a, m, k))
        onehot.reshape(-1)[np.arange(0, a * m * k, k) + labels.ravel()] = 1.0  # (A, M, k)
        if g is None:  # every row: G broadcast over restarts
            gz = np.matmul(gram, onehot.reshape(r, b, m, k)).reshape(n, m, k)
        else:
            gz = np.matmul(g, onehot)  # (A, M, k)
        sizes = _counts(labels, k).astype(np.float64)  # (A, k)
        within = np.einsum("bic,bic->bc", onehot, gz)  # (A, k) = diag(Z^T G Z)
        safe = np.where(sizes > 0, sizes, 1.0)
        # diag - 2 gz / n + within / n^2, operation by operation in that order, in place.
        dist = np.multiply(gz, 2.0, out=gz)
        np.divide(dist, safe[:, None, :], out=dist)
        np.subtract(diag[:, :, None], dist, out=dist)
        np.add(dist, (within / safe**2)[:, None, :], out=dist)  # (A, M, k)
        gone = (sizes == 0) | ~ok  # (A, k)
        if gone.any():
            dist[np.broadcast_to(gone[:, None, :], dist.shape)] = np.inf
        new = np.argmin(dist, axis=2)  # (A, M)
        new = _fill_empty(new, dist, ok)
        done = (new == labels).all(axis=1) if it < max_iter - 1 else np.ones(a, dtype=bool)
        if done.any():
            at = np.flatnonzero(done)
            out[left[at]] = new[at]
            own[left[at]] = dist[at[:, None], np.arange(m), new[at]]
            if at.size == a:
                break
            keep = ~done
            left, diag, ok, new = left[keep], diag[keep], ok[keep], new[keep]
            g = gram[src[left]] if g is None else g[keep]
        labels = new
    return out.reshape(r, b, m), np.maximum(own, 0.0).sum(axis=1).reshape(r, b)


def _counts(labels: IntArray, k: int) -> IntArray:
    """Cluster sizes (A, k) of labels (A, M) in [0, k)."""
    a = labels.shape[0]
    flat = (labels + k * np.arange(a)[:, None]).ravel()
    return np.bincount(flat, minlength=a * k).reshape(a, k)


def _fill_empty(labels: IntArray, dist: FloatMatrix, valid: npt.NDArray[np.bool_]) -> IntArray:
    """Give each empty valid cluster the point farthest from its own centre (as scikit-learn)."""
    k = valid.shape[1]
    empty = (_counts(labels, k) == 0) & valid  # (A, k)
    if not empty.any():
        return labels
    labels = labels.copy()
    for row in np.flatnonzero(empty.any(axis=1)):
        own = dist[row, np.arange(labels.shape[1]), labels[row]].copy()
        own[~np.isfinite(own)] = 0.0
        for c in np.flatnonzero(empty[row]):
            sizes = np.bincount(labels[row], minlength=k)
            movable = np.flatnonzero(sizes[labels[row]] > 1)
            if movable.size == 0:
                break
            far = movable[np.argmax(own[movable])]
            labels[row, far] = c
            own[far] = 0.0
    return labels


def canonical_rows(labels: IntArray) -> IntArray:
    """:func:`canonical_labels` of each row of (B, M) labels in [0, k), vectorised."""
    b, m = labels.shape
    if b == 0 or m == 0:
        return labels.astype(np.int64)
    k = int(labels.max()) + 1
    hit = labels[:, None, :] == np.arange(k)[None, :, None]  # (B, k, M)
    first = np.where(hit.any(axis=2), hit.argmax(axis=2), m)  # (B, k) first step of each id
    rank = (first[:, None, :] < first[:, :, None]).sum(axis=2)  # (B, k) ids seen before it
    return np.take_along_axis(rank, labels, axis=1).astype(np.int64)


def kmeans_bucket(
    stack: Sequence[npt.NDArray[np.floating]], config: StructureRewardConfig
) -> IntArray:
    """KMeans (k = round(sqrt(M))) for B responses with the same step count M.

    B arrays of shape (M, dim) -> canonical labels (B, M). Embeddings need not be normalised:
    clustering always runs on unit vectors (SARL v2 §3.2). Deterministic for a given input and
    ``config.seed``; fewer distinct embeddings than k give as many clusters as distinct
    embeddings. The ``kmeans_n_init`` restarts run as extra rows of one batch (best inertia
    wins, the first of equal ones); the results are those of seeding the bucket's responses
    together, one restart after another, from one generator.
    """
    b, m = len(stack), (stack[0].shape[0] if len(stack) else 0)
    if m <= 1 or b == 0:
        unit_grams(stack)  # validates rows
        return np.zeros((b, m), dtype=np.int64)
    k, n_init = kmeans_k(m), config.kmeans_n_init
    size = _chunk_size(m, k, n_init)
    draws = _Draws(config.seed, m, k)
    first, rounds = draws.draw(n_init)
    settled = 0  # restarts before this one drew what a loop over restarts draws
    while True:
        labels = np.empty((b, m), dtype=np.int64)
        used = np.zeros(n_init, dtype=np.int64)
        for lo in range(0, b, size):
            labels[lo : lo + size], chunk_used = _kmeans_chunk(
                stack[lo : lo + size], k, first, rounds, config.kmeans_max_iter
            )
            np.maximum(used, chunk_used, out=used)
        # A loop over restarts stops drawing for a restart once no response has a point left
        # to add (fewer distinct points than k in every one): the next restarts then start
        # earlier in the stream. Draw those again from there and redo the bucket (it takes a
        # bucket made only of responses with repeated steps).
        early = np.flatnonzero(used[settled:-1] < k - 1)
        if early.size == 0:
            return labels
        r = settled + int(early[0])
        settled = r + 1
        draws.rewind(r, int(used[r]))
        more = draws.draw(n_init - r - 1)
        first = np.concatenate([first[: r + 1], more[0]])
        rounds = np.concatenate([rounds[: r + 1], more[1]])


def _kmeans_chunk(
    stack: Sequence[npt.NDArray[np.floating]],
    k: int,
    first: IntArray,
    draws: FloatMatrix,
    max_iter: int,
) -> tuple[IntArray, IntArray]:
    """All restarts of B responses: canonical labels of the best (B, M), rounds of draws used
    per restart (see :func:`_kmeans_pp`)."""
    shape = (len(stack), stack[0].shape[0], stack[0].shape[0])
    gram = _unit_grams(stack, _SCRATCH.take("gram", shape))
    d2 = _squared_distances(gram, _SCRATCH.take("d2", shape), _SCRATCH.take("tmp", shape))
    centers, used = _kmeans_pp(d2, k, first, draws)  # (R, B, k)
    valid = centers >= 0
    # d_start[r, b, i, c] = d2[b, i, centers[r, b, c]]: each point's distance to each centre.
    d_start = np.take_along_axis(d2[None], np.maximum(centers, 0)[:, :, None, :], axis=3)
    if not valid.all():
        d_start[np.broadcast_to(~valid[:, :, None, :], d_start.shape)] = np.inf  # (R, B, M, k)
    labels, inertia = _lloyd(gram, np.argmin(d_start, axis=3), valid, max_iter)
    best = np.zeros(labels.shape[1:], dtype=np.int64)
    best_inertia = np.full(labels.shape[1], np.inf)
    for r in range(labels.shape[0]):
        better = inertia[r] < best_inertia - 1e-12
        best[better] = labels[r][better]
        best_inertia = np.where(better, inertia[r], best_inertia)
    return canonical_rows(best), used


def kmeans_labels(embeddings: npt.ArrayLike, config: StructureRewardConfig) -> IntArray:
    """KMeans labels of one response's steps, (M, dim) -> (M,); see :func:`kmeans_bucket`."""
    x = np.asarray(embeddings)
    if x.ndim != 2:
        raise ValueError(f"step_embeddings: expected shape (steps, dim), got {x.shape}")
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    labels: IntArray = kmeans_bucket([x], config)[0]
    return labels


def hdbscan_params(num_steps: int) -> tuple[int, int]:
    """(min_cluster_size, min_samples) of A.1: max(2, min(5, M/4)) and that minus one.

    M/4 is floored because HDBSCAN needs an integer; flooring never exceeds the paper's M/4.
    """
    min_cluster_size = max(2, min(5, num_steps // 4))
    return min_cluster_size, min_cluster_size - 1


def hdbscan_labels(embeddings: npt.ArrayLike, config: StructureRewardConfig) -> IntArray:
    """Cluster one response's steps with HDBSCAN (Euclidean) and resolve noise; canonical labels.

    HDBSCAN cannot cluster fewer than two points: M <= 1 gives one cluster.
    """
    from sklearn.cluster import HDBSCAN  # deferred: keeps `import sarl` light

    x = np.asarray(embeddings, dtype=np.float64)  # (M, dim)
    if x.ndim != 2:
        raise ValueError(f"step_embeddings: expected shape (steps, dim), got {x.shape}")
    unit_grams([x])  # validates rows (zero / non-finite) with the same messages as KMeans
    x = _safe_scale(x)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    m = x.shape[0]
    if m <= 1:
        return np.zeros(m, dtype=np.int64)
    min_cluster_size, min_samples = hdbscan_params(m)
    model = HDBSCAN(min_cluster_size=min_cluster_size, min_samples=min_samples, metric="euclidean")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate points make sklearn warn; labels are fine
        raw = np.asarray(model.fit_predict(x), dtype=np.int64)
    return canonical_labels(resolve_noise(raw, x, config.noise_policy))


def resolve_noise(labels: IntArray, x: FloatMatrix, policy: str) -> IntArray:
    """Replace HDBSCAN's noise label -1 by a real cluster id according to ``policy``.

    'separate' (paper A.1): all noise points form one extra cluster; if every point is noise,
    all go to one default cluster. 'singletons': each noise point is its own cluster.
    'nearest': each noise point joins the cluster whose centroid is nearest (all noise -> one).
    """
    noise = labels < 0
    if not noise.any():
        return labels
    if noise.all():
        return np.zeros_like(labels)
    out = labels.copy()
    next_id = int(labels.max()) + 1
    if policy == "separate":
        out[noise] = next_id
    elif policy == "singletons":
        out[noise] = next_id + np.arange(int(noise.sum()))
    elif policy == "nearest":
        ids = np.unique(labels[~noise])
        centroids = np.stack([x[labels == c].mean(axis=0) for c in ids])  # (clusters, dim)
        d2 = ((x[noise][:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        out[noise] = ids[np.argmin(d2, axis=1)]
    else:
        raise ValueError(f"noise_policy: unknown value {policy!r}")
    return out


def cluster_steps(embeddings: npt.ArrayLike, config: StructureRewardConfig) -> IntArray:
    """Dispatch on ``config.clustering``."""
    if config.clustering == "kmeans":
        return kmeans_labels(embeddings, config)
    return hdbscan_labels(embeddings, config)
