"""The optimised structure reward returns exactly what it returned before (issue 26 item 2).

``reference_impl.py`` is the KMeans and batch path as of commit 258ef0b, frozen. Production now
runs restarts as extra rows of one batch (drawing their random numbers up front), clusters a
bucket chunk by chunk in reused buffers, skips the magnitude pass for rows whose norms show
they need none, and builds maps and their statistics for a bucket at once. None of it may move
a bit: labels, SR, C, L and the maps must be equal, not close, on every input, including the
ones that take the rare paths (buckets that run out of distinct points, extreme rows, errors).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarl.rewards.structure import StructureRewardConfig, clustering
from sarl.rewards.structure.clustering import canonical_labels, kmeans_bucket
from sarl.rewards.structure.grams import unit_grams
from sarl.rewards.structure.graph import (
    average_path_length,
    build_map,
    build_maps,
    clustering_coefficient,
    map_statistics,
)
from sarl.rewards.structure.scorer import score_embeddings_batch, score_labels, score_walks
from tests.sarl.rewards.structure import reference_impl as before

KINDS = ("normal", "duplicates", "identical", "clusters", "lattice")


def bucket(
    rng: np.random.Generator, kind: str, b: int, m: int, dim: int, dtype: type
) -> list[np.ndarray]:
    """``b`` responses of ``m`` steps: random, with repeated steps, all steps equal, around
    sqrt(m) directions at a random noise level, or on an integer lattice (exact ties)."""
    out = []
    for _ in range(b):
        if kind == "normal":
            x = rng.normal(size=(m, dim))
        elif kind == "duplicates":
            base = rng.normal(size=(int(rng.integers(1, 4)), dim))
            x = base[rng.integers(0, len(base), size=m)]
        elif kind == "identical":
            x = np.tile(rng.normal(size=(1, dim)), (m, 1))
        elif kind == "clusters":
            f = max(1, round(np.sqrt(m)))
            centers = rng.normal(size=(f, dim))
            noise = float(rng.choice([0.01, 0.3, 1.0]))
            x = centers[rng.integers(0, f, size=m)] + noise * rng.normal(size=(m, dim))
        else:
            x = rng.integers(-2, 3, size=(m, dim)).astype(float)
            x[np.all(x == 0, axis=1), 0] = 1.0
        out.append(x.astype(dtype))
    return out


def cases(seed: int, n: int) -> Iterator[tuple[list[np.ndarray], StructureRewardConfig]]:
    rng = np.random.default_rng(seed)
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        m = int(rng.integers(1, 40))
        dim = int(rng.choice([3, 8, 64]))
        dtype = np.float32 if i % 2 else np.float64
        stack = bucket(rng, kind, int(rng.integers(1, 10)), m, dim, dtype)
        for n_init in (1, 3, 10):
            max_iter = int(rng.choice([1, 2, 300]))
            seed_ = int(rng.integers(0, 5))
            yield (
                stack,
                StructureRewardConfig(kmeans_n_init=n_init, kmeans_max_iter=max_iter, seed=seed_),
            )


@pytest.mark.parametrize("chunk_bytes", [1, clustering._CHUNK_BYTES])
def test_kmeans_labels_equal_the_implementation_before(
    chunk_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chunk_bytes = 1: one response per chunk, so a bucket's restarts span many chunks.
    monkeypatch.setattr(clustering, "_CHUNK_BYTES", chunk_bytes)
    for stack, config in cases(seed=chunk_bytes, n=60):
        expected = before.kmeans_bucket(stack, config)
        got = kmeans_bucket(stack, config)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), config


@pytest.mark.parametrize("b", [1, 2, 5])
@pytest.mark.parametrize("distinct", [1, 2, 3])
def test_buckets_that_run_out_of_points_seed_as_they_did_before(
    b: int, distinct: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fewer distinct steps than k in every response: the old loop over restarts stopped
    drawing early, so the next restart started earlier in the stream; production replays that.
    Such partitions hardly depend on the draws, so the centres themselves are compared."""
    monkeypatch.setattr(clustering, "_CHUNK_BYTES", 20_000)  # several chunks per bucket
    seeded: list[np.ndarray] = []
    seed_chunk = clustering._kmeans_pp

    def spy(
        d2: np.ndarray, k: int, first: np.ndarray, draws: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        centers, used = seed_chunk(d2, k, first, draws)
        seeded.append(centers)
        return centers, used

    monkeypatch.setattr(clustering, "_kmeans_pp", spy)
    rng = np.random.default_rng(b * 10 + distinct)
    replays = 0
    for m in (5, 12, 20, 33):
        stack = []
        for _ in range(b):
            base = rng.normal(size=(distinct, 6))
            stack.append(base[rng.integers(0, distinct, size=m)])
        d2 = before.squared_distances(before.unit_grams(stack))
        k = before.kmeans_k(m)
        for n_init in (2, 3, 10):
            for seed in range(2):
                config = StructureRewardConfig(kmeans_n_init=n_init, seed=seed)
                seeded.clear()
                labels = kmeans_bucket(stack, config)
                assert np.array_equal(labels, before.kmeans_bucket(stack, config))
                chunks = -(-b // clustering._chunk_size(m, k, n_init))
                replays += len(seeded) > chunks
                got = np.concatenate(seeded[-chunks:], axis=1)  # the last pass: (R, B, k)
                draws = np.random.default_rng(seed)
                expected = [before._kmeans_pp(d2, k, draws) for _ in range(n_init)]
                assert np.array_equal(got, np.stack(expected))
    assert replays  # some buckets did stop early


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-1000, 1000), min_size=12, max_size=12),
    st.sampled_from([np.float32, np.float64]),
    st.integers(0, 2**32 - 1),
)
def test_grams_of_rows_of_any_magnitude_equal_the_implementation_before(
    exponents: list[int], dtype: type, seed: int
) -> None:
    """A bucket mixing in-range responses with rows scaled far out of range: the fast check on
    the norms must send exactly the responses that need it through the exact pass."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 4, 16))
    with np.errstate(all="ignore"):  # float32 overflows to inf or underflows to 0
        scaled = np.ldexp(x, np.array(exponents).reshape(3, 4, 1)).astype(dtype)
        stack = [scaled[0], x[1].astype(dtype), scaled[2]]
        try:
            expected = before.unit_grams(stack)
        except ValueError as e:  # such rows are errors, the same ones
            with pytest.raises(ValueError, match=re.escape(str(e))):
                unit_grams(stack)
            return
    assert np.array_equal(unit_grams(stack), expected)


@pytest.mark.parametrize("bad", [0.0, np.nan, np.inf])
@pytest.mark.parametrize("where", [(0, 0), (2, 3), (4, 1)])
def test_errors_name_the_same_row(bad: float, where: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    stack = [rng.normal(size=(5, 8)).astype(np.float32) for _ in range(6)]
    stack[where[0]][where[1]] = bad
    stack[5][4] = 0.0  # a later bad row: the first one is named
    config = StructureRewardConfig()
    with np.errstate(all="ignore"), pytest.raises(ValueError) as expected:
        before.kmeans_bucket(stack, config)
    with np.errstate(all="ignore"), pytest.raises(ValueError) as got:
        kmeans_bucket(stack, config)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("n_init", [1, 10])
@pytest.mark.parametrize("noise", [0.003, 0.03, 0.1])
def test_batch_scores_equal_the_implementation_before(n_init: int, noise: float) -> None:
    """Paper-like responses (50-70 steps, several buckets): every result equal — score, C, L,
    labels and map."""
    rng = np.random.default_rng(round(noise * 1000) + n_init)
    batch = []
    for _ in range(40):
        m = int(rng.integers(50, 71))
        f = round(np.sqrt(m))
        centers = rng.normal(size=(f, 128))
        centers /= np.linalg.norm(centers, axis=1, keepdims=True)
        walk = rng.integers(0, f, size=m)
        batch.append((centers[walk] + noise * rng.normal(size=(m, 128))).astype(np.float32))
    batch.insert(3, np.zeros((0, 128), np.float32))
    for variant in ("full", "c_only", "l_only"):
        config = StructureRewardConfig(kmeans_n_init=n_init, variant=variant, degenerate_score=0.3)
        assert score_embeddings_batch(batch, config) == before.score_embeddings_batch(batch, config)


walks = st.integers(1, 70).flatmap(
    lambda m: st.lists(st.lists(st.integers(0, 11), min_size=m, max_size=m), min_size=1, max_size=6)
)


@settings(max_examples=300, deadline=None)
@given(walks, st.sampled_from(["full", "c_only", "l_only"]))
def test_walks_scored_together_equal_score_labels(rows: list[list[int]], variant: str) -> None:
    config = StructureRewardConfig.model_validate({"variant": variant, "degenerate_score": 0.5})
    stacked = np.stack([canonical_labels(r) for r in rows])
    flags = [i % 2 == 1 for i in range(len(rows))]
    got = score_walks(stacked, config, truncated=flags)
    expected = [
        score_labels(w.tolist(), config, truncated=t) for w, t in zip(stacked, flags, strict=True)
    ]
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(walks)
def test_maps_built_together_equal_one_at_a_time(rows: list[list[int]]) -> None:
    stacked = np.stack([canonical_labels(r) for r in rows])
    maps = [build_map(w.tolist()) for w in stacked]
    assert build_maps(stacked) == maps
    c, path = map_statistics(stacked)
    for g, ci, pi in zip(maps, c.tolist(), path.tolist(), strict=True):
        neighbors = g.neighbors()
        assert ci == clustering_coefficient(neighbors)  # exactly, not approximately
        expected = average_path_length(neighbors)
        assert (pi == expected) if expected is not None else np.isnan(pi)


def test_threads_clustering_at_once_get_their_own_buffers() -> None:
    """Chunk buffers are per thread (verl's async reward loop scores in threads)."""
    rng = np.random.default_rng(0)
    stacks = [bucket(rng, "clusters", 20, m, 32, np.float32) for m in (30, 45, 60, 75)]
    config = StructureRewardConfig(kmeans_n_init=3)
    expected = [before.kmeans_bucket(s, config) for s in stacks]
    got: dict[int, list[np.ndarray]] = {}

    def work(i: int) -> None:
        got[i] = [kmeans_bucket(stacks[(i + j) % 4], config) for j in range(8)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, results in got.items():
        for j, labels in enumerate(results):
            assert np.array_equal(labels, expected[(i + j) % 4])
