"""Sentence encoders: the one home for running a local sentence-transformers model.

Built by :func:`sarl.embedding.loading.load_encoder` for
:class:`~sarl.embedding.local.LocalEmbedder` (step embeddings in-process) and for the embedding
service (``sarl_services.embedding``), so both give the same vectors at the same speed;
:mod:`sarl.embedding.onnx_export` runs both backends to check an export. Two backends run the
same model:

* ``torch``: the sentence-transformers modules themselves (any device, any module stack).
* ``onnx``: the model's transformer exported once to ONNX (:mod:`sarl.embedding.onnx_export`,
  cached on disk with the model's tokenizer, checked against the torch vectors before use) and
  run with ONNX Runtime; pooling and normalisation in numpy. A cached export loads alone, without
  building the torch model. On CPU it is the faster one (``make bench`` measures it).
  It covers models made of a Transformer, a Pooling (``mean``, ``cls`` or ``max``) and
  optionally a Normalize module — what text-embedding models such as all-MiniLM-L6-v2 are.

Which backend a model gets (``auto``, ``onnx``, ``torch``) is decided by
:func:`sarl.embedding.loading.load_encoder`. Both backends work in two steps, so a caller can
tokenize once: :meth:`SentenceEncoder.token_ids` (truncated ids of each text; the service counts
usage and admission work with them) and :meth:`SentenceEncoder.encode_ids`, which sorts the texts
by length (longest first) and runs them in calls padded to the longest text of each call:
torch in calls of :data:`ROWS_PER_THREAD` rows per thread, one call's ops split over the threads;
ONNX Runtime in calls of :data:`ONNX_ROWS_PER_CALL` rows, one call per thread, ``threads`` at
once. (On CPU,
128 texts of 15-70 tokens ran ~1.7x faster in calls of 32 on one thread than in one call; on
the bundled model, one thread, 16 rows per call took 6.7-7.1 ms of CPU per text on ONNX Runtime
and 32 rows 7.6, which pad more. On 2 threads, passes of 128 texts: 8-row calls, longest first,
235-281 texts/s; 16-row calls 224-265; shortest first 170-245; passes of 48: 243-270 vs 162-226
for 16-row calls, which leave a thread idle for the third call.)
"""

from __future__ import annotations

import copy
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from sarl.embedding.base import EmbeddingError, FloatArray, normalize_rows

Backend = Literal["auto", "onnx", "torch"]
BACKENDS: tuple[Backend, ...] = ("auto", "onnx", "torch")
#: Rows per forward call and intra-op thread (torch: a call's ops split over the threads).
ROWS_PER_THREAD = 16
#: Rows per ONNX Runtime call (one thread each): finer calls keep the threads evenly loaded.
ONNX_ROWS_PER_CALL = 8
#: Pooling modes the ONNX backend computes (sentence-transformers' names).
ONNX_POOLING = ("mean", "cls", "max")
IdArray = npt.NDArray[np.int64]


class SentenceEncoder(ABC):
    """A loaded model: tokenize, then encode token ids into unit-norm float32 rows."""

    backend: str

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_length: int,
        threads: int,
        name: str,
        rows_per_call: int | None = None,
    ) -> None:
        self.name = name
        self.max_length = max_length
        self.threads = threads
        #: Texts per forward call (default: the backend's, see the module doc).
        self.rows_per_call = rows_per_call or self._default_rows(threads)
        self.dim = 0  # set by the subclass
        self._tokenizer = tokenizer
        self._pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
        self._local = threading.local()  # one tokenizer per thread: they are not thread-safe

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids (special tokens included), truncated to ``max_length``; safe
        to call from any thread."""
        tokenizer = getattr(self._local, "tokenizer", None)
        if tokenizer is None:
            tokenizer = self._local.tokenizer = copy.deepcopy(self._tokenizer)
        ids: list[list[int]] = tokenizer(
            list(texts),
            truncation=True,
            max_length=self.max_length,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        return ids

    def encode_ids(self, ids: Sequence[Sequence[int]]) -> FloatArray:
        """Unit-norm ``(len(ids), dim)`` rows, in input order (one thread at a time)."""
        if not ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Longest calls first: calls that run side by side on threads then finish together, the
        # short ones filling in at the end (shortest first left one thread idle through the
        # longest call: 128 texts of 15-70 tokens, 2 threads, ~215 vs ~250 texts/s).
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        rows = self._rows_for(len(ids))
        calls = [order[start : start + rows] for start in range(0, len(order), rows)]
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        for chosen, vectors in zip(calls, self._run_calls(ids, calls), strict=True):
            out[chosen] = vectors
        # The same normalisation for every backend (and as before this module existed).
        return normalize_rows(out, source=f"model {self.name}")

    def _default_rows(self, threads: int) -> int:
        """Rows per call: a call's ops are split over the intra-op threads."""
        return ROWS_PER_THREAD * threads

    def _rows_for(self, texts: int) -> int:
        """Rows per call for ``texts`` texts."""
        return self.rows_per_call

    def _run_calls(
        self, ids: Sequence[Sequence[int]], calls: list[list[int]]
    ) -> Iterator[FloatArray]:
        """Pooled rows of each call (the texts ``ids[i]`` for ``i`` in the call), in order."""
        for chosen in calls:
            yield self._call(ids, chosen)

    def _call(self, ids: Sequence[Sequence[int]], chosen: list[int]) -> FloatArray:
        input_ids, mask = self._pad([ids[i] for i in chosen])  # (rows, longest) each
        return self._forward(input_ids, mask)

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """Unit-norm ``(len(texts), dim)`` rows of ``texts``."""
        return self.encode_ids(self.token_ids(texts))

    def _pad(self, ids: Sequence[Sequence[int]]) -> tuple[IdArray, IdArray]:
        longest = max(len(i) for i in ids)
        input_ids = np.full((len(ids), longest), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), longest), dtype=np.int64)
        for row, seq in enumerate(ids):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return input_ids, mask

    @abstractmethod
    def _forward(self, input_ids: IdArray, mask: IdArray) -> FloatArray:
        """Pooled (not yet normalised) ``(rows, dim)`` float32 embeddings of one call."""


class TorchEncoder(SentenceEncoder):
    """The sentence-transformers modules on torch (every module stack, every device)."""

    backend = "torch"

    def __init__(
        self, model: Any, *, threads: int, name: str, rows_per_call: int | None = None
    ) -> None:
        super().__init__(
            model.tokenizer,
            max_length=max_length_of(model),
            threads=threads,
            name=name,
            rows_per_call=rows_per_call,
        )
        self._model = model
        self._inputs = tuple(model.tokenizer.model_input_names)
        self.dim = int(_embedding_dimension(model))

    def _forward(self, input_ids: IdArray, mask: IdArray) -> FloatArray:
        import torch

        device = self._model.device
        features: dict[str, Any] = {
            "input_ids": torch.from_numpy(input_ids).to(device),
            "attention_mask": torch.from_numpy(mask).to(device),
        }
        if "token_type_ids" in self._inputs:  # one sequence per text: all zeros
            features["token_type_ids"] = torch.zeros_like(features["input_ids"])
        with torch.inference_mode():
            pooled = self._model.forward(features)["sentence_embedding"]
        vectors: FloatArray = pooled.float().cpu().numpy()
        return vectors


class OnnxEncoder(SentenceEncoder):
    """The exported transformer on ONNX Runtime; pooling in numpy.

    Each call runs on one intra-op thread and ``threads`` calls run at once (ONNX Runtime
    releases the GIL): 8- or 16-row ops are too short to split well, so the threads' synchronisation
    per op costs more than it saves. On 2 cores, 512 step texts: 278 texts/s this way against
    209 with both threads inside each call (torch: 255)."""

    backend = "onnx"

    def __init__(
        self,
        onnx_path: Path,
        tokenizer: Any,
        *,
        pooling: str,
        max_length: int,
        threads: int,
        name: str,
        rows_per_call: int | None = None,
    ) -> None:
        import onnxruntime as ort

        super().__init__(
            tokenizer,
            max_length=max_length,
            threads=threads,
            name=name,
            rows_per_call=rows_per_call,
        )
        if pooling not in ONNX_POOLING:
            raise EmbeddingError(
                f"backend 'onnx': pooling {pooling!r} is not one of {ONNX_POOLING}"
            )
        self.pooling = pooling
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(onnx_path), options, providers=["CPUExecutionProvider"]
        )
        self._calls = (
            ThreadPoolExecutor(threads, thread_name_prefix="onnx") if threads > 1 else None
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.dim = int(self._session.get_outputs()[0].shape[-1])

    def _default_rows(self, threads: int) -> int:
        return ONNX_ROWS_PER_CALL  # one call per thread (class doc)

    def _rows_for(self, texts: int) -> int:
        # Fewer texts than a call per thread: split them evenly, so every thread has a share (a
        # pass of 3 texts in one call left a core idle: 107 texts/s at 64 clients x 1 text).
        return max(1, min(self.rows_per_call, -(-texts // self.threads)))

    def _run_calls(
        self, ids: Sequence[Sequence[int]], calls: list[list[int]]
    ) -> Iterator[FloatArray]:
        if self._calls is None or len(calls) == 1:
            return super()._run_calls(ids, calls)
        return self._calls.map(lambda chosen: self._call(ids, chosen), calls)

    def _forward(self, input_ids: IdArray, mask: IdArray) -> FloatArray:
        feed = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        hidden = self._session.run(None, feed)[0]  # (rows, longest, dim)
        return pool(hidden, mask, self.pooling)


def pool(hidden: npt.NDArray[np.floating[Any]], mask: IdArray, mode: str) -> FloatArray:
    """sentence-transformers' Pooling of ``hidden`` ``(rows, tokens, dim)`` over the tokens
    ``mask`` keeps: ``mean`` (sum / max(count, 1e-9)), ``cls`` (first token) or ``max`` (padding
    excluded)."""
    if mode == "cls":
        first: FloatArray = np.ascontiguousarray(hidden[:, 0], dtype=np.float32)
        return first
    keep = mask[:, :, None].astype(np.float32)  # (rows, tokens, 1)
    if mode == "max":
        largest: FloatArray = np.where(keep > 0, hidden, np.float32(-1e9)).max(axis=1)
        return largest.astype(np.float32)
    summed = (hidden * keep).sum(axis=1)  # (rows, dim)
    counts = np.maximum(keep.sum(axis=1), np.float32(1e-9))  # (rows, 1)
    mean: FloatArray = (summed / counts).astype(np.float32)
    return mean


def onnx_pooling(model: Any) -> str | None:
    """The pooling mode when ``model`` (a SentenceTransformer) is Transformer -> Pooling ->
    optional Normalize with a pooling the ONNX backend computes; None otherwise."""
    names = [type(module).__name__ for module in model]
    if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return None
    mode = getattr(model[1], "pooling_mode", None)
    if mode is None:  # older sentence-transformers: one flag per mode
        config = model[1].get_config_dict()
        flags = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}
        flags["max"] = "pooling_mode_max_tokens"
        chosen = [m for m, key in flags.items() if config.get(key)]
        others = [k for k, v in config.items() if k.startswith("pooling_mode_") and v]
        # Any other mode set too (mean_sqrt_len, weightedmean, lasttoken) concatenates vectors.
        mode = chosen[0] if len(chosen) == 1 and len(others) == 1 else None
    return mode if mode in ONNX_POOLING else None


def onnx_available() -> bool:
    """ONNX Runtime and the ONNX exporter's package are importable."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _embedding_dimension(model: Any) -> int:
    """The model's output dimension (sentence-transformers renamed the getter in 6.x)."""
    getter = getattr(model, "get_embedding_dimension", None)
    return int(getter() if getter is not None else model.get_sentence_embedding_dimension())


def max_length_of(model: Any) -> int:
    """Tokens kept per text: the model's ``max_seq_length``, else its tokenizer's limit."""
    limit = model.max_seq_length or getattr(model.tokenizer, "model_max_length", None)
    if not limit or limit > 1_000_000:  # transformers' "no limit" sentinel is ~1e30
        raise EmbeddingError(f"model {model}: no max_seq_length; set it in sentence_bert_config")
    return int(limit)
