"""Any local Hugging Face causal LM as a step embedder (``embedder.kind: hf_causal``).

Built by ``sarl.embedding.factory.make_embedder``; the structure scorer calls :meth:`embed` with
step strings. Each string is one sequence (A.1's "per-step chunks"): tokenized as the model
expects (``add_special_tokens=True``, so a BOS-using model gets its BOS), run through the model,
and the hidden states of the string's own tokens at ``layer`` are mean-pooled and normalised
(:mod:`sarl.embedding.hidden_states`, which also explains the default layer). All of the
string's tokens are pooled: a multi-byte character that a byte-level BPE splits into several
byte tokens ("∑" into three) contributes every one of them, as it does under ``kind: policy``
on both of its token-span paths (:mod:`sarl.embedding.spans`); only the ``max_tokens`` cut can
end inside a character, which then contributes its bytes before the cut. So a base model,
or a checkpoint of the policy, embeds steps with no embedding server; for the policy's states
*during* training, in the context of the whole response, use ``kind: policy``.

Needs torch and transformers (the ``[trl]`` or ``[embed]`` extras); they are imported on first
use. The model loads on the first :meth:`embed` call (once, under a lock), from a local
directory or, for a hub id, from the local Hugging Face cache (or the hub, when online).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sarl.embedding.base import EmbeddingError, FloatArray
from sarl.embedding.hidden_states import (
    DEFAULT_LAYER,
    LayerChoice,
    Positions,
    num_hidden_layers,
    pool_layer,
    resolve_layer,
)

DEFAULT_BATCH_SIZE = 8  # step strings per forward pass
DEFAULT_MAX_TOKENS = 512  # tokens per step string; a longer step is pooled over its first ones


def _model_source(model: str) -> str:
    """A directory path (checked to exist) or a hub id, as given."""
    path = Path(model).expanduser()
    looks_like_path = model.startswith(("/", "./", "../", "~"))
    if path.is_dir():
        return str(path)
    if looks_like_path:
        raise EmbeddingError(f"embedder.model: {model!r} is not a model directory")
    return model


class HFCausalEmbedder:
    """Step strings -> unit-norm mean of a causal LM's layer states over each string's tokens.

    ``batch_size`` strings per forward pass (right-padded, attention-masked: a string's vector
    does not depend on its batch-mates beyond float rounding); a string's first ``max_tokens``
    tokens (special tokens included) are kept. Duplicate strings are embedded once per call.
    """

    def __init__(
        self,
        model: str,
        *,
        layer: LayerChoice = DEFAULT_LAYER,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        device: str = "cpu",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"embedder.batch_size: must be >= 1, got {batch_size}")
        if max_tokens < 1:
            raise ValueError(f"embedder.max_tokens: must be >= 1, got {max_tokens}")
        self.source = _model_source(model)
        self.layer = layer
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.device = device
        self._loaded: tuple[Any, Any, int] | None = None  # (model, tokenizer, layer index)
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any, int]:
        with self._lock:
            if self._loaded is None:
                try:
                    import torch
                    from transformers import AutoModelForCausalLM, AutoTokenizer
                except ImportError as e:
                    raise EmbeddingError(
                        "embedder.kind 'hf_causal' needs torch and transformers "
                        "(pip install 'sarl[trl]')"
                    ) from e
                # float32 on CPU (bf16 matmuls are slow there); the checkpoint's dtype elsewhere.
                dtype: Any = torch.float32 if self.device == "cpu" else "auto"
                try:
                    tokenizer = AutoTokenizer.from_pretrained(self.source)
                    model = AutoModelForCausalLM.from_pretrained(self.source, dtype=dtype)
                except (OSError, ValueError) as e:
                    raise EmbeddingError(
                        f"embedder.model: cannot load {self.source!r} as a causal LM: {e}"
                    ) from e
                model.to(self.device)  # type: ignore[arg-type]  # transformers' stub: device str ok
                model.eval()  # type: ignore[no-untyped-call]
                index = resolve_layer(self.layer, num_hidden_layers(model))
                self._loaded = (model, tokenizer, index)
            return self._loaded

    @property
    def layer_index(self) -> int:
        """The ``hidden_states`` index pooled (loads the model)."""
        return self._load()[2]

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """``(len(texts), dim)`` float32 unit rows, in input order (``(0, 0)`` for no texts)."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        model, tokenizer, layer = self._load()
        unique = list(dict.fromkeys(texts))
        sequences, pools = self._encode(tokenizer, unique)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        with self._lock:  # one forward at a time: callers may share the embedder across threads
            rows = pool_layer(
                model, sequences, pools, layer=layer, batch_size=self.batch_size, pad_id=pad
            )
        stacked = np.concatenate(rows)  # (unique, dim)
        index = {text: i for i, text in enumerate(unique)}
        return stacked[[index[text] for text in texts]]

    def _encode(
        self, tokenizer: Any, texts: list[str]
    ) -> tuple[list[list[int]], list[list[Positions]]]:
        """Token ids per string (the model's special tokens added, cut at ``max_tokens``) and,
        per string, one pool: the positions of the string's own tokens."""
        full = tokenizer(texts, add_special_tokens=True)["input_ids"]
        bare = tokenizer(texts, add_special_tokens=False)["input_ids"]
        sequences: list[list[int]] = []
        pools: list[list[Positions]] = []
        for i, (whole, own) in enumerate(zip(full, bare, strict=True)):
            # Where the string's own tokens start is found before the cut: after it, a string
            # longer than max_tokens no longer contains them whole and the search fell back to
            # 0, pooling the BOS a tokenizer adds in front.
            start = _find(list(whole), list(own))
            ids = list(whole)[: self.max_tokens]
            positions = np.arange(start, min(start + len(own), len(ids)), dtype=np.intp)
            if positions.size == 0:  # the string is only special tokens: pool what there is
                positions = np.arange(len(ids), dtype=np.intp)
            if positions.size == 0:
                raise EmbeddingError(f"embedder: text {i} has no tokens")
            sequences.append(ids)
            pools.append([positions])
        return sequences, pools


def _find(ids: list[int], own: list[int]) -> int:
    """Where the string's own tokens start among ``ids`` (after a BOS, say); 0 if not found."""
    for start in range(len(ids) - min(len(own), len(ids)) + 1):
        if ids[start : start + len(own)] == own[: len(ids) - start]:
            return start
    return 0
