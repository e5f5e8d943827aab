"""Gram matrices of unit-normalised step embeddings, and the squared distances they give.

The input of the structure reward's clustering (:mod:`sarl.rewards.structure.clustering`, its
only caller): KMeans runs on a response's (M, M) Gram matrix instead of its (M, dim) embeddings,
and HDBSCAN validates and rescales rows here first. Rows of any finite magnitude work
(:func:`_safe_scale`); zero and non-finite rows raise ValueError naming the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float64]


def squared_distances(gram: FloatMatrix) -> FloatMatrix:
    """Pairwise squared Euclidean distances from (stacked) Gram matrices, shape (..., M, M)."""
    return _squared_distances(gram, np.empty_like(gram), np.empty_like(gram))


def _squared_distances(gram: FloatMatrix, out: FloatMatrix, scratch: FloatMatrix) -> FloatMatrix:
    """:func:`squared_distances` written to ``out``; ``scratch`` (same shape) is overwritten."""
    diag = np.diagonal(gram, axis1=-2, axis2=-1)  # (..., M)
    np.add(diag[..., :, None], diag[..., None, :], out=out)
    np.subtract(out, np.multiply(gram, 2.0, out=scratch), out=out)  # (G_ii + G_jj) - 2 G_ij
    np.maximum(out, 0.0, out=out)  # rounding can give tiny negatives
    return out


def unit_grams(stack: Sequence[npt.NDArray[np.floating]]) -> FloatMatrix:
    """Gram matrices of the *unit-normalised* rows of B (M, dim) arrays -> (B, M, M) float64.

    Normalising the small Gram matrix (G_ij / (|x_i| |x_j|)) instead of the (B, M, dim) input
    touches the large array once. Each Gram is one 2-D ``x @ x.T`` (BLAS syrk; numpy's stacked
    matmul falls back to a slow loop for transposed views), so a response gets bit-identical
    entries whichever batch it is scored in. Rows of any finite magnitude work (1e200 or
    5e-324: see :func:`_safe_scale`). Raises ValueError naming the row for zero or non-finite
    rows.
    """
    m = stack[0].shape[0] if len(stack) else 0
    return _unit_grams(stack, np.empty((len(stack), m, m)))


def _unit_grams(stack: Sequence[npt.NDArray[np.floating]], gram: FloatMatrix) -> FloatMatrix:
    """:func:`unit_grams` written to ``gram`` (B, M, M)."""
    b = len(stack)
    with np.errstate(over="ignore", invalid="ignore"):  # extreme rows: redone below
        for i in range(b):
            x = stack[i]
            gram[i] = x @ x.T
    sq_norms = np.diagonal(gram, axis1=1, axis2=2).copy()  # (B, M)
    # _safe_scale leaves a response alone unless a row's largest |entry| lies outside
    # [2**-41, 2**40); the squared norms bound it (|x|^2 / dim <= peak^2 <= |x|^2, up to
    # rounding far inside the margins below), so only a response with a squared norm outside
    # [dim 2**-78, 2**76] pays for the exact check: a pass over its (M, dim) rows that costs
    # half as much as its Gram at paper scale. The others' Gram entries are finite (at most
    # 2**77 in size), so only the checked ones are searched for non-finite values.
    low = np.array([float(x.shape[1]) for x in stack]) * 2.0**-78  # (B,)
    checked = np.flatnonzero(~((sq_norms >= low[:, None]) & (sq_norms <= 2.0**76)).all(axis=1))
    for j in checked.tolist():
        x = _safe_scale(stack[j])
        gram[j] = x @ x.T
        sq_norms[j] = np.diagonal(gram[j])
    bad = ~np.isfinite(sq_norms) | (sq_norms <= 0.0)
    if bad.any():
        b, i = (int(v) for v in np.argwhere(bad)[0])
        problem = "is a zero vector" if sq_norms[b, i] == 0.0 else "has non-finite values"
        raise ValueError(f"step_embeddings: row {i} {problem} and cannot be normalised")
    if not np.isfinite(gram[checked]).all():
        raise ValueError("step_embeddings: contains non-finite values")
    inv = 1.0 / np.sqrt(sq_norms)  # (B, M)
    gram *= inv[:, :, None]  # (G_ij / |x_i|) / |x_j|, in that order
    gram *= inv[:, None, :]
    return gram


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
