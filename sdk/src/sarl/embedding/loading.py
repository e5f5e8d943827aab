"""Load a local sentence-transformers model as an encoder, on the backend it should run on.

Called by :class:`~sarl.embedding.local.LocalEmbedder` (step embeddings in-process) and by the
embedding service (``sarl_services.embedding``) through :func:`load_encoder`. ``auto`` picks
``onnx`` on CPU when ONNX Runtime is installed and the model is covered (and exports correctly),
else ``torch`` (the backends: :mod:`sarl.embedding.encoders`). On CPU with the model's export
already cached (:mod:`sarl.embedding.onnx_export`), the ONNX encoder is built from the cache
alone: no sentence-transformers import, no torch model. Kept apart from the encoders because the
export checks its file by running them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from sarl.embedding.base import EmbeddingError
from sarl.embedding.encoders import (
    BACKENDS,
    ONNX_POOLING,
    Backend,
    OnnxEncoder,
    SentenceEncoder,
    TorchEncoder,
    max_length_of,
    onnx_available,
    onnx_pooling,
)
from sarl.embedding.onnx_export import OnnxExportError, cached_export, exported_onnx

_LOG = logging.getLogger(__name__)


def load_encoder(
    model_path: Path,
    *,
    backend: Backend = "auto",
    device: str = "cpu",
    threads: int | None = None,
    cache_dir: Path | None = None,
    rows_per_call: int | None = None,
) -> SentenceEncoder:
    """Load the sentence-transformers model at ``model_path`` on ``backend`` (see the module
    doc). ``threads``: intra-op threads (None: torch's current setting); ``rows_per_call``:
    texts per forward call (None: the backend's default, see the module doc). On CPU with the
    model's export already cached, ``auto`` and ``onnx`` load from the cache alone (the torch
    model is not built). Raises :class:`EmbeddingError` naming the fix when ``backend='onnx'``
    cannot serve this model."""
    if backend not in BACKENDS:
        raise EmbeddingError(f"backend: must be one of {BACKENDS}, got {backend!r}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is on disk or the load fails
    if backend != "torch" and device.startswith("cpu") and onnx_available():
        cached = _cached_onnx_encoder(model_path, threads, cache_dir, rows_per_call)
        if cached is not None:
            return cached
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise EmbeddingError(
            "a local embedding model needs sentence-transformers (pip install 'sarl[embed]')"
        ) from e
    import torch
    from transformers.utils import logging as hf_logging

    name = model_path.name
    if backend == "onnx" and not device.startswith("cpu"):  # before loading onto the device
        raise EmbeddingError(
            f"backend 'onnx' cannot serve {name}: the ONNX backend runs on the CPU, device is "
            f"{device!r}; use backend 'torch'"
        )
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a bar per load is noise
    model = SentenceTransformer(str(model_path), device=device)
    model.eval()
    count = threads if threads is not None else torch.get_num_threads()
    why_not = _why_not_onnx(model, device)
    if backend == "onnx" and why_not:
        raise EmbeddingError(f"backend 'onnx' cannot serve {name}: {why_not}; use backend 'torch'")
    if backend == "torch" or why_not:
        if backend == "auto":
            _LOG.info("embedding model %s: torch backend (%s)", name, why_not)
        return TorchEncoder(model, threads=count, name=name, rows_per_call=rows_per_call)
    try:
        path = exported_onnx(model, model_path, cache_dir=cache_dir)
    except OnnxExportError as e:
        if backend == "onnx":
            raise EmbeddingError(
                f"backend 'onnx' cannot serve {name}: {e}; use backend 'torch'"
            ) from e
        _LOG.warning("embedding model %s: torch backend (ONNX export failed: %s)", name, e)
        return TorchEncoder(model, threads=count, name=name, rows_per_call=rows_per_call)
    pooling = onnx_pooling(model)
    assert pooling is not None  # _why_not_onnx checked it
    return OnnxEncoder(
        path,
        model.tokenizer,
        pooling=pooling,
        max_length=max_length_of(model),
        threads=count,
        name=name,
        rows_per_call=rows_per_call,
    )


def _cached_onnx_encoder(
    model_path: Path, threads: int | None, cache_dir: Path | None, rows_per_call: int | None
) -> OnnxEncoder | None:
    """The ONNX encoder built from a complete cache entry alone (its file, the tokenizer the
    export saved and the pooling and length it recorded), or None to load the model: no
    sentence-transformers import, no torch model built (:mod:`sarl.embedding.onnx_export`).
    An entry whose files do not hash to its record is not a hit (the full path exports it
    again); one that does not load (damaged by hand) is logged and left to the full path."""
    hit = cached_export(model_path, cache_dir=cache_dir)
    if hit is None:
        return None
    try:
        import torch
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(hit.tokenizer_dir))
        return OnnxEncoder(
            hit.path,
            tokenizer,
            pooling=hit.pooling,
            max_length=hit.max_length,
            threads=threads if threads is not None else torch.get_num_threads(),
            name=model_path.name,
            rows_per_call=rows_per_call,
        )
    except Exception as e:  # any load error: the full path loads the model and checks again
        _LOG.warning("ONNX cache entry %s does not load (%s); loading the model", hit.path, e)
        return None


def _why_not_onnx(model: Any, device: str) -> str | None:
    """Why the ONNX backend cannot run ``model`` here, or None when it can."""
    if not device.startswith("cpu"):
        return f"the ONNX backend runs on the CPU, device is {device!r}"
    if not onnx_available():
        return "onnxruntime and onnx are not installed (pip install 'sarl[embed]')"
    if onnx_pooling(model) is None:
        modules = " -> ".join(type(m).__name__ for m in model)
        return (
            f"its modules are {modules}; the ONNX backend covers Transformer -> Pooling "
            f"({'/'.join(ONNX_POOLING)}) -> optional Normalize"
        )
    return None


__all__ = ["load_encoder"]
