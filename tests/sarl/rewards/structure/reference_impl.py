"""The structure reward's KMeans as it was before issue 26 item 2, frozen as the reference.

A verbatim copy of ``sarl.rewards.structure.clustering`` at commit 258ef0b (``canonical_labels``
to ``kmeans_bucket``): one batch row per response, restarts one after another, a Python loop
per response for canonical labels; scores went through ``score_labels`` response by response,
which production still uses for single responses. ``test_identity.py`` checks that the
production path returns exactly what this returned, and ``tests/bench/bench_structure.py``
times both in one run. Not collected by pytest; not to be edited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.result import StructureResult
from sarl.rewards.structure.scorer import score_labels

IntArray = npt.NDArray[np.int64]
FloatMatrix = npt.NDArray[np.float64]


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


def squared_distances(gram: FloatMatrix) -> FloatMatrix:
    """Pairwise squared Euclidean distances from (stacked) Gram matrices, shape (..., M, M)."""
    diag = np.diagonal(gram, axis1=-2, axis2=-1)  # (..., M)
    d2 = diag[..., :, None] + diag[..., None, :] - 2.0 * gram
    np.maximum(d2, 0.0, out=d2)  # rounding can give tiny negatives
    return d2


def unit_grams(stack: Sequence[npt.NDArray[np.floating]]) -> FloatMatrix:
    """Gram matrices of the *unit-normalised* rows of B (M, dim) arrays -> (B, M, M) float64.

    Normalising the small Gram matrix (G_ij / (|x_i| |x_j|)) instead of the (B, M, dim) input
    touches the large array once. Each Gram is one 2-D ``x @ x.T`` (BLAS syrk; numpy's stacked
    matmul falls back to a slow loop for transposed views), so a response gets bit-identical
    entries whichever batch it is scored in. Rows of any finite magnitude work (1e200 or
    5e-324: see :func:`_safe_scale`). Raises ValueError naming the row for zero or non-finite
    rows.
    """
    b, m = len(stack), (stack[0].shape[0] if len(stack) else 0)
    gram = np.empty((b, m, m))  # (B, M, M)
    for i in range(b):
        x = _safe_scale(stack[i])
        gram[i] = x @ x.T
    sq_norms = np.diagonal(gram, axis1=1, axis2=2).copy()  # (B, M)
    bad = ~np.isfinite(sq_norms) | (sq_norms <= 0.0)
    if bad.any():
        b, i = (int(v) for v in np.argwhere(bad)[0])
        problem = "is a zero vector" if sq_norms[b, i] == 0.0 else "has non-finite values"
        raise ValueError(f"step_embeddings: row {i} {problem} and cannot be normalised")
    if not np.isfinite(gram).all():
        raise ValueError("step_embeddings: contains non-finite values")
    inv = 1.0 / np.sqrt(sq_norms)  # (B, M)
    return gram * inv[:, :, None] * inv[:, None, :]


# Rows whose largest |entry| lies within 2**±_SAFE_EXP have squared norms and dot products far
# from overflow and underflow, in float32 (squares overflow past ~1.8e19) as in float64, even
# summed over millions of dimensions.
_SAFE_EXP = 40
_Rows = TypeVar("_Rows", bound=npt.NDArray[np.floating])


def _safe_scale(x: _Rows) -> _Rows:
    """``x`` (M, dim) with each row of extreme magnitude multiplied by a power of two.

    Clustering uses only each row's direction, so a positive factor per row changes nothing —
    and a power of two changes no bit of the normalised Gram matrix, only where squares would
    overflow (1e200**2 = inf) or underflow (5e-324**2 = 0). Rows already in range, every row of
    a real embedder, are left as they are (no copy). Non-finite and zero rows are left for the
    caller to report.
    """
    if x.size == 0:
        return x
    with np.errstate(invalid="ignore"):
        peak = np.abs(x).max(axis=1)  # (M,)
    _, exp = np.frexp(peak)  # peak = f * 2**exp with 0.5 <= f < 1
    extreme = np.isfinite(peak) & (peak > 0) & (np.abs(exp) > _SAFE_EXP)
    if not extreme.any():
        return x
    out = x.copy()
    out[extreme] = np.ldexp(x[extreme], -exp[extreme, None].astype(np.int32))
    return out


def _kmeans_pp(d2: FloatMatrix, k: int, rng: np.random.Generator) -> IntArray:
    """Greedy KMeans++ seeding (Arthur & Vassilvitskii 2007) for B same-size responses at once.

    ``d2`` is (B, M, M). As in scikit-learn, each new centre is the best of 2 + floor(ln k)
    candidates drawn with probability proportional to D^2. All rows of a bucket consume the same
    random numbers, exactly as if each response were seeded alone with ``config.seed`` — so a
    response's labels never depend on its batch. A row stops adding centres when every point
    coincides with a centre (fewer distinct points than k); its missing centres are -1.
    Returns (B, k) point indices.
    """
    b, m, _ = d2.shape
    rows = np.arange(b)
    centers = np.full((b, k), -1, dtype=np.int64)
    centers[:, 0] = int(rng.integers(m))
    closest = d2[rows, centers[:, 0]].copy()  # (B, M) squared distance to the nearest centre
    n_trials = 2 + int(math.log(k))
    for c in range(1, k):
        draws = rng.random(n_trials)  # drawn for every bucket, like a per-response generator
        total = closest.sum(axis=1)  # (B,)
        active = total > 0.0
        if not active.any():
            break
        cumulative = np.cumsum(closest, axis=1)  # (B, M)
        thresholds = draws[None, :] * total[:, None]  # (B, T)
        # searchsorted per row, side='left': number of cumulative values below the threshold.
        cand = (cumulative[:, None, :] < thresholds[:, :, None]).sum(axis=2)
        cand = np.minimum(cand, m - 1)  # (B, T)
        trial = np.minimum(closest[:, None, :], d2[rows[:, None], cand])  # (B, T, M)
        best = np.argmin(trial.sum(axis=2), axis=1)  # (B,)
        centers[active, c] = cand[rows, best][active]
        closest[active] = trial[rows, best][active]
    return centers


def _lloyd(
    gram: FloatMatrix, labels: IntArray, valid: npt.NDArray[np.bool_], max_iter: int
) -> tuple[IntArray, npt.NDArray[np.float64]]:
    """Lloyd iterations in kernel form for B responses; returns (labels (B, M), inertia (B,)).

    With Z the (M, k) one-hot assignment and n_c the cluster sizes, the squared distance of
    point i to the mean of cluster c is G_ii - 2 (G Z)_ic / n_c + (Z^T G Z)_cc / n_c^2.
    ``valid`` (B, k) marks clusters that exist (a row with fewer distinct points has fewer).
    """
    b, m, _ = gram.shape
    k = valid.shape[1]
    diag = np.diagonal(gram, axis1=1, axis2=2)  # (B, M)
    eye = np.eye(k)
    dist = np.zeros((b, m, k))
    for _ in range(max_iter):
        onehot = eye[labels]  # (B, M, k)
        sizes = onehot.sum(axis=1)  # (B, k)
        gz = np.matmul(gram, onehot)  # (B, M, k)
        within = np.einsum("bic,bic->bc", onehot, gz)  # (B, k) = diag(Z^T G Z)
        safe = np.where(sizes > 0, sizes, 1.0)
        dist = diag[:, :, None] - 2.0 * gz / safe[:, None, :] + (within / safe**2)[:, None, :]
        dist[np.broadcast_to(((sizes == 0) | ~valid)[:, None, :], dist.shape)] = np.inf
        new = np.argmin(dist, axis=2)  # (B, M)
        new = _fill_empty(new, dist, valid)
        if np.array_equal(new, labels):
            break
        labels = new
    own = np.take_along_axis(dist, labels[:, :, None], axis=2)[:, :, 0]  # (B, M)
    return labels, np.maximum(own, 0.0).sum(axis=1)


def _fill_empty(labels: IntArray, dist: FloatMatrix, valid: npt.NDArray[np.bool_]) -> IntArray:
    """Give each empty valid cluster the point farthest from its own centre (as scikit-learn)."""
    k = valid.shape[1]
    counts = (labels[:, :, None] == np.arange(k)).sum(axis=1)  # (B, k)
    empty = (counts == 0) & valid
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


def kmeans_bucket(
    stack: Sequence[npt.NDArray[np.floating]], config: StructureRewardConfig
) -> IntArray:
    """KMeans (k = round(sqrt(M))) for B responses with the same step count M.

    B arrays of shape (M, dim) -> canonical labels (B, M). Embeddings need not be normalised:
    clustering always runs on unit vectors (SARL v2 §3.2). Deterministic for a given input and
    ``config.seed``; fewer distinct embeddings than k give as many clusters as distinct
    embeddings.
    """
    gram = unit_grams(stack)  # (B, M, M)
    b, m = gram.shape[0], gram.shape[1]
    if m <= 1:
        return np.zeros((b, m), dtype=np.int64)
    k = kmeans_k(m)
    d2 = squared_distances(gram)
    rng = np.random.default_rng(config.seed)
    best = np.zeros((b, m), dtype=np.int64)
    best_inertia = np.full(b, np.inf)
    for _ in range(config.kmeans_n_init):
        centers = _kmeans_pp(d2, k, rng)  # (B, k)
        valid = centers >= 0
        d_start = np.take_along_axis(d2, np.maximum(centers, 0)[:, None, :], axis=2)  # (B, M, k)
        d_start[np.broadcast_to(~valid[:, None, :], d_start.shape)] = np.inf
        labels, inertia = _lloyd(gram, np.argmin(d_start, axis=2), valid, config.kmeans_max_iter)
        better = inertia < best_inertia - 1e-12
        best[better] = labels[better]
        best_inertia = np.where(better, inertia, best_inertia)
    return np.stack([canonical_labels(row) for row in best]) if b else best


def score_embeddings_batch(
    embeddings: Sequence[npt.NDArray[np.floating]], config: StructureRewardConfig
) -> list[StructureResult]:
    """The batch path of ``sarl.rewards.structure.scorer`` at 258ef0b, for KMeans: one bucket per
    shape, then ``score_labels`` per response."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, a in enumerate(embeddings):
        if a.shape[0]:
            groups.setdefault(a.shape, []).append(i)
    labels: list[IntArray | None] = [None] * len(embeddings)
    for idx in groups.values():
        for i, row in zip(idx, kmeans_bucket([embeddings[i] for i in idx], config), strict=True):
            labels[i] = row
    return [score_labels(lab.tolist() if lab is not None else [], config) for lab in labels]
