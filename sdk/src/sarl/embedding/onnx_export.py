"""Export a sentence-transformers model's transformer to ONNX once, check it, cache it on disk.

Called by :func:`sarl.embedding.loading.load_encoder` for the ``onnx`` backend (the embedding
service and the local embedder), and by ``sarl serve embedding --export-only`` to ship the file
in an image. Steps:

1. **Cache key**: a hash of the model directory's files (config, weights, tokenizer) and of the
   torch, onnx and onnxruntime versions, so a changed model or toolchain exports again.
2. **Export** with torch's TorchScript exporter (opset 17, batch and sequence dynamic) of the
   Hugging Face model with *eager* attention (explicit matmuls and softmax). ONNX Runtime's own
   graph optimisations run when the session loads. Measured on the bundled model, one thread,
   CPU time per text: this file 6.7-7.6 ms; the SDPA graph 7.0-8.3 ms; the file after ONNX
   Runtime's transformer optimizer fused each layer's attention into one ``Attention`` op
   8.1-8.5 ms (slower on CPU, so not used); torch 7.2-8.1 ms.
3. **Check** against the torch model on :data:`CHECK_TEXTS` (short, long, truncated): every
   vector's cosine to the torch vector must be at least :data:`MIN_COSINE`, else
   :class:`OnnxExportError` (and the ``auto`` backend stays on torch).
4. **Write atomically** (a temporary name, then ``os.replace``): the model's tokenizer as it
   saves itself (``tokenizer/``), the file, and last ``check.json``, which records the check,
   what the ONNX backend needs besides the file (pooling mode, tokens kept per text) and the
   sha256 of the file and of every tokenizer file; two processes exporting at once both end
   with a complete entry.
5. **Load from the cache alone** (:func:`cached_export`): a complete entry is all the ONNX
   backend needs, so a process that finds one (the service at each start, each local run) does
   not import sentence-transformers nor build the torch model (~5 s of a ~9 s start on 2 cores,
   and the torch weights' memory). The entry's files are hashed first and must be exactly the
   ones recorded (:mod:`sarl.embedding.onnx_hashes`): a planted or changed file, an extra one,
   or a record without hashes is logged and the model exported again. Verifying costs 0.08
   CPU-seconds per start (90 MB of all-MiniLM-L6-v2). ONNX Runtime then opens the file by its
   path: building the session from the hashed bytes instead would close the window between
   check and load, but ONNX Runtime keeps those bytes (``InferenceSession._model_bytes``,
   +93 MiB held for the process's life, measured), so the entry's directory is trusted not to be
   swapped within that moment.

Cache directory: ``cache_dir``, else ``$SARL_CACHE_DIR/onnx``, else ``~/.cache/sarl/onnx``; when
that is not writable (a read-only pod), a temporary directory for this process.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sarl.embedding.encoders import OnnxEncoder, TorchEncoder, max_length_of, onnx_pooling
from sarl.embedding.onnx_hashes import (
    MODEL_FILE,
    file_sha256,
    mismatch,
    tree_hashes,
)

_LOG = logging.getLogger(__name__)

#: Bump when the export recipe changes, so cached files are exported again.
RECIPE = "sarl-onnx-3"
#: Smallest cosine between an ONNX vector and the torch vector of the same text (float32
#: rounding gives ~1e-7 for all-MiniLM-L6-v2).
MIN_COSINE = 1.0 - 1e-5
CHECK_TEXTS = [
    "Compute 3 + 4 = 7.",
    "First, list every divisor of 36: 1, 2, 3, 4, 6, 9, 12, 18 and 36.",
    "Check: the sum of the interior angles of a hexagon is (6 - 2) x 180 = 720 degrees.",
    "x",
    " ".join(f"step {i}: multiply {i} by {i + 3} and add the carry." for i in range(80)),
]


#: The tokenizer's own files (``save_pretrained``) in a cache entry.
TOKENIZER_DIR = "tokenizer"


@dataclass(frozen=True)
class CachedExport:
    """A complete cache entry, verified: the checked file and what the ONNX backend needs
    besides it."""

    path: Path  # model.onnx
    tokenizer_dir: Path
    pooling: str
    max_length: int


class OnnxExportError(RuntimeError):
    """The model could not be exported, or the export does not give the torch vectors."""


def cache_root(cache_dir: Path | None = None) -> Path:
    """Where exported files live (see the module doc)."""
    if cache_dir is not None:
        return cache_dir
    base = os.environ.get("SARL_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "sarl"
    return root / "onnx"


def model_key(model_path: Path) -> str:
    """A hash of every file of the model directory and of the exporting toolchain."""
    import onnx
    import onnxruntime
    import torch

    digest = hashlib.sha256(RECIPE.encode())
    for version in (torch.__version__, onnx.__version__, onnxruntime.__version__):
        digest.update(version.encode())
    for path in sorted(p for p in model_path.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(model_path)).encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:24]


def cached_export(model_path: Path, *, cache_dir: Path | None = None) -> CachedExport | None:
    """The cache's complete entry for the model at ``model_path``, or None (not exported yet,
    or an entry a stopped process left incomplete: it is exported again)."""
    return _complete(cache_root(cache_dir) / model_key(model_path))


def _complete(target: Path) -> CachedExport | None:
    """The entry in ``target`` when its file, tokenizer and record are all there and the files
    hash to the record (:mod:`sarl.embedding.onnx_hashes`)."""
    final, tokenizer = target / MODEL_FILE, target / TOKENIZER_DIR
    try:
        record = json.loads((target / "check.json").read_text())
    except (OSError, ValueError):
        return None
    pooling, max_length = record.get("pooling"), record.get("max_length")
    if not (isinstance(pooling, str) and isinstance(max_length, int) and max_length > 0):
        return None
    if not (final.is_file() and (tokenizer / "tokenizer_config.json").is_file()):
        return None
    try:
        actual = {MODEL_FILE: file_sha256(final), **tree_hashes(tokenizer, TOKENIZER_DIR)}
    except OSError:
        return None
    why = mismatch(record.get("sha256"), actual)
    if why is not None:
        _LOG.warning("ONNX cache entry %s not loaded: %s; exporting it again", target, why)
        return None
    return CachedExport(final, tokenizer, pooling, max_length)


def exported_onnx(model: Any, model_path: Path, *, cache_dir: Path | None = None) -> Path:
    """The checked ONNX file of ``model`` (a SentenceTransformer loaded from ``model_path``),
    exported now unless the cache has a complete entry."""
    target = cache_root(cache_dir) / model_key(model_path)
    hit = _complete(target)
    if hit is not None:
        return hit.path
    target = _writable(target)
    try:
        return _export_checked(model, model_path, target)
    except OSError as e:  # disk full, permissions changed under us
        raise OnnxExportError(f"could not write the export to {target}: {e}") from e


def _writable(target: Path) -> Path:
    """``target``, created, if this process can write there; else a temporary directory that
    is removed when the process exits (ONNX Runtime has read the file by then)."""
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=target):
            return target
    except OSError:
        try:
            fallback = Path(tempfile.mkdtemp(prefix="sarl-onnx-"))
        except OSError as e:  # nowhere to write: the auto backend stays on torch
            raise OnnxExportError(f"neither {target} nor a temporary directory is writable") from e
        atexit.register(shutil.rmtree, fallback, ignore_errors=True)
        _LOG.warning("cache %s is not writable; exporting to %s for this process", target, fallback)
        return fallback


def _export_checked(model: Any, model_path: Path, target: Path) -> Path:
    """Export and check the file; move the tokenizer, then the file into ``target``; write
    ``check.json`` last (an entry is complete only with it)."""
    final = target / MODEL_FILE
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=target) as scratch:
        exported = Path(scratch) / "model.onnx"
        _export(model, exported)
        cosine = _check(model, exported)
        if cosine < MIN_COSINE:
            raise OnnxExportError(
                f"the ONNX export does not give the torch vectors (min cosine {cosine:.7f}; "
                f"need >= {MIN_COSINE})"
            )
        tokenizer = Path(scratch) / TOKENIZER_DIR
        model.tokenizer.save_pretrained(str(tokenizer))
        hashes = {MODEL_FILE: file_sha256(exported), **tree_hashes(tokenizer, TOKENIZER_DIR)}
        _move_tokenizer(tokenizer, target / TOKENIZER_DIR, hashes, Path(scratch))
        os.replace(exported, final)  # replaces a stale or planted file (or link) as a whole
        record = {
            "min_cosine": cosine,
            "texts": len(CHECK_TEXTS),
            "pooling": onnx_pooling(model),
            "max_length": max_length_of(model),
            "sha256": hashes,
        }
        _write_atomically(target / "check.json", json.dumps(record).encode())
    _LOG.info(
        "exported %s to %s (min cosine %.9f, %.1f s)",
        model_path.name,
        final,
        cosine,
        time.perf_counter() - start,
    )
    return final


def _move_tokenizer(saved: Path, dest: Path, hashes: dict[str, str], scratch: Path) -> None:
    """Move the ``saved`` tokenizer to ``dest``. One already there is kept only when it is
    exactly this one (another process moved the same model's tokenizer first); any other (a
    stale or planted one) is moved into ``scratch``, removed with it, and this one put in."""
    try:
        os.replace(saved, dest)  # same directory: atomic
        return
    except OSError:
        pass
    wanted = {k: v for k, v in hashes.items() if k != MODEL_FILE}
    with contextlib.suppress(OSError):
        if tree_hashes(dest, TOKENIZER_DIR) == wanted:
            return
    os.replace(dest, scratch / "replaced-tokenizer")
    os.replace(saved, dest)


def _export(model: Any, path: Path) -> None:
    import torch

    transformer = model[0].auto_model
    names = list(model.tokenizer.model_input_names)
    sample = model.tokenizer(CHECK_TEXTS[:2], padding=True, return_tensors="pt")
    inputs = tuple(sample[n] for n in names)

    class _LastHidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(names, args, strict=True))).last_hidden_state

    attention = getattr(transformer.config, "_attn_implementation", None)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    try:
        with contextlib.suppress(Exception):
            transformer.set_attn_implementation("eager")  # the faster graph (module doc)
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
            torch.onnx.export(
                _LastHidden(transformer).eval(),
                inputs,
                str(path),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
    except Exception as e:  # the exporter raises many types; all mean "not exportable"
        raise OnnxExportError(f"torch.onnx.export failed: {type(e).__name__}: {e}") from e
    finally:
        if attention is not None:
            with contextlib.suppress(Exception):
                transformer.set_attn_implementation(attention)


def _check(model: Any, path: Path) -> float:
    """Smallest cosine between the file's vectors and the torch model's on CHECK_TEXTS."""
    pooling = onnx_pooling(model)
    if pooling is None:
        raise OnnxExportError("the model's modules are not covered by the ONNX backend")
    reference = TorchEncoder(model, threads=1, name="check").encode(CHECK_TEXTS)
    try:
        encoder = OnnxEncoder(
            path,
            model.tokenizer,
            pooling=pooling,
            max_length=max_length_of(model),
            threads=1,
            name="check",
        )
        vectors = encoder.encode(CHECK_TEXTS)
    except Exception as e:  # a file ORT cannot run fails the check
        _LOG.info("ONNX file %s does not run: %s", path.name, e)
        return -1.0
    return float(np.min(np.sum(reference * vectors, axis=1)))


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
