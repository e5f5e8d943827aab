"""Per-response clustering of step embeddings into latent reasoning functions (SARL v2 §3.2, A.1).

Called by the structure scorer (``scorer.py``) once per response, possibly in worker processes.

* KMeans: k = round(sqrt(M)) clamped to [1, M]; KMeans++ seeding with a fixed seed, then Lloyd
  iterations. Because step embeddings are unit-normalised and M is small (tens of steps) while
  the dimension is large (384–4096), the whole algorithm runs on the M x M Gram matrix
  ("kernel" form of Lloyd's algorithm): exact same partitions as Lloyd in input space, but each
  iteration costs O(M^2 k) instead of O(M k d), and there is no per-call library overhead.
* HDBSCAN: scikit-learn's implementation with the paper's settings and a choice of noise policy.

Labels are returned in canonical form: clusters numbered 0, 1, ... by first appearance in step
order, so equal partitions give equal label lists whatever the algorithm's internal numbering.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from sarl.rewards.structure.config import StructureRewardConfig

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
