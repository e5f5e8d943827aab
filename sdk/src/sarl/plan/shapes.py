"""The shapes of the models a plan sizes: parameters, layers, widths, vocabulary.

Called by :mod:`sarl.plan.plan` (through :func:`shape_of`). A shape comes from, in order: the
built-in tiny model's spec fields; a local model directory's ``config.json``; the table
:data:`KNOWN` of the models the presets and examples name, matched by Hub id or by the last
component of an ``s3://``/``pvc://``/``hf://`` model source (``sarl models copy`` keeps the Hub
name as that component). Local directories are read only where the caller says so (the user's
own ``sarl plan``), never in the operator. Nothing here fetches anything: a spec is untrusted
input on a cluster, and most GPU clusters cannot reach the Hub. A model found nowhere has no
shape; the plan then says so and cannot check memory.

Parameter counts are computed from the architecture (:func:`parameters`) and tested against the
model cards' totals (e.g. Qwen3-4B: 4.0B, 3.6B without embeddings).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer (Qwen2/Qwen3/Llama family: GQA attention, SwiGLU MLP)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool = False
    qk_norm: bool = False

    @property
    def layer_parameters(self) -> int:
        """Parameters of one decoder layer: attention (q, k, v, o), the MLP's gate, up and
        down projections, two RMSNorms (and Qwen3's q/k norms)."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden
        if self.qkv_bias:
            attention += q + 2 * kv
        norms = 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        return attention + 3 * self.hidden * self.intermediate + norms

    @property
    def embedding_parameters(self) -> int:
        """The token embedding, and the output projection unless it is tied to it."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def parameters(self) -> int:
        """All parameters (the final norm included)."""
        return self.layers * self.layer_parameters + self.embedding_parameters + self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token in bf16: keys and values of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


def _qwen3(
    hidden: int, layers: int, heads: int, intermediate: int, *, tied: bool, kv_heads: int = 8
) -> ModelShape:
    return ModelShape(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=128,
        intermediate=intermediate,
        vocab=151936,
        tied_embeddings=tied,
        qk_norm=True,
    )


def _qwen25(
    hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, *, tied: bool
) -> ModelShape:
    return ModelShape(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate=intermediate,
        vocab=152064 if hidden >= 3584 else 151936,
        tied_embeddings=tied,
        qkv_bias=True,
    )


#: Architectures of the models the presets, examples and docs name, from each model's
#: ``config.json`` on the Hub (hidden_size, num_hidden_layers, num_attention_heads,
#: num_key_value_heads, head_dim, intermediate_size, vocab_size, tie_word_embeddings).
KNOWN: Final[dict[str, ModelShape]] = {
    "qwen/qwen3-0.6b": _qwen3(1024, 28, 16, 3072, tied=True),
    "qwen/qwen3-1.7b": _qwen3(2048, 28, 16, 6144, tied=True),
    "qwen/qwen3-4b": _qwen3(2560, 36, 32, 9728, tied=True),
    "qwen/qwen3-4b-instruct-2507": _qwen3(2560, 36, 32, 9728, tied=True),
    "qwen/qwen3-4b-thinking-2507": _qwen3(2560, 36, 32, 9728, tied=True),
    "qwen/qwen3-8b": _qwen3(4096, 36, 32, 12288, tied=False),
    "qwen/qwen3-14b": _qwen3(5120, 40, 40, 17408, tied=False),
    "qwen/qwen3-embedding-0.6b": _qwen3(1024, 28, 16, 3072, tied=True),
    "qwen/qwen2.5-0.5b-instruct": _qwen25(896, 24, 14, 2, 4864, tied=True),
    "qwen/qwen2.5-1.5b-instruct": _qwen25(1536, 28, 12, 2, 8960, tied=True),
    "qwen/qwen2.5-7b-instruct": _qwen25(3584, 28, 28, 4, 18944, tied=False),
    "qwen/qwen2.5-math-7b": _qwen25(3584, 28, 28, 4, 18944, tied=False),
    "meta-llama/llama-3.1-8b-instruct": ModelShape(
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate=14336,
        vocab=128256,
        tied_embeddings=False,
    ),
}


def from_config(config: dict[str, Any]) -> ModelShape:
    """The shape in a Hugging Face ``config.json`` (Qwen2/Qwen3/Llama keys); KeyError when a
    key the plan needs is missing."""
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    model_type = str(config.get("model_type", ""))
    return ModelShape(
        hidden=hidden,
        layers=int(config["num_hidden_layers"]),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate=int(config["intermediate_size"]),
        vocab=int(config["vocab_size"]),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("attention_bias", model_type == "qwen2")),
        qk_norm=model_type.startswith("qwen3"),
    )


def _key(name: str) -> str:
    """A model name as :data:`KNOWN` is keyed: a Hub id, or ``<source>://.../<Hub name>``'s
    last two components (``hf://``) or its last one matched against the Hub names."""
    if "://" in name:
        scheme, rest = name.split("://", 1)
        parts = [p for p in rest.split("/") if p]
        if scheme == "hf" and len(parts) >= 2:
            return "/".join(parts[-2:]).lower()
        return parts[-1].lower() if parts else ""
    return name.lower()


def shape_of(
    name: str, tiny: ModelShape | None = None, *, read_local: bool = False
) -> ModelShape | None:
    """The shape of ``spec.model.name`` (or a served model's name), or None when unknown.

    ``tiny``: the built-in model's shape, used for ``builtin:`` names. ``read_local``: read a
    local directory's ``config.json`` (``sarl plan`` on the user's machine); off in the
    operator, the webhook and ``sarl submit``, which never open a path a spec names."""
    if name.startswith("builtin:"):
        return tiny
    local = Path(name) / "config.json"
    if read_local and "://" not in name and local.is_file():
        try:
            return from_config(json.loads(local.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None
    key = _key(name)
    if key in KNOWN:
        return KNOWN[key]
    by_last = {hub.split("/", 1)[1]: shape for hub, shape in KNOWN.items()}
    return by_last.get(key)
