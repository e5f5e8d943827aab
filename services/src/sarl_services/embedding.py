"""OpenAI-compatible embedding server for a local sentence-transformers model, on KServe.

Started by ``sarl serve embedding`` (:mod:`sarl_services.cli`); the reward service and the sdk's
:class:`~sarl.embedding.openai_client.OpenAIEmbeddingClient` call it. Routes:

* ``POST /v1/embeddings`` and ``POST /openai/v1/embeddings`` (KServe's OpenAI prefix), so a client
  with ``base_url="http://host:port"`` or ``".../openai"`` works. Request and response follow
  OpenAI/vLLM: ``{"model"?, "input": str | [str], "encoding_format"?: "float" | "base64",
  "dimensions"?}`` -> ``{"id", "object": "list", "created", "model", "data": [{"object":
  "embedding", "index", "embedding"}], "usage": {"prompt_tokens", "total_tokens"}}``. Vectors are
  unit-norm (as vLLM returns them) and equal to :class:`~sarl.embedding.local.LocalEmbedder`'s.
* ``GET /v1/models`` and ``GET /openai/v1/models``: the OpenAI model list (served name only);
  the body also carries KServe's V1 ``"models"`` key, since this route shadows KServe's list.
* ``POST /v1/models/<name>:predict`` (KServe V1) with ``{"instances": [str, ...]}`` ->
  ``{"predictions": [[float]]}``: served here, not by KServe, so it has the same body, count and
  size limits as ``/v1/embeddings``.
* KServe's health, readiness (``GET /v1/models/<name>``: 200 once loaded, 503 before) and
  ``GET /metrics``; every other KServe route is closed (:mod:`sarl_services.routes`).

All inputs of one request are encoded on a single worker thread, 256 distinct strings per call
(duplicates once): a sentence-transformers model is not safe to call concurrently, on CPU torch
already uses every core for one batch, and between calls other requests take their turn and a
request whose client has gone stops (:mod:`sarl_services.disconnect`).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kserve
import numpy as np
import orjson
from fastapi import APIRouter, Request, Response

from sarl.embedding.base import FloatArray, normalize_rows
from sarl.embedding.factory import DEFAULT_LOCAL_MODEL
from sarl.embedding.local import resolve_model_path
from sarl_services.body import read_json_object
from sarl_services.disconnect import unless_disconnected
from sarl_services.errors import BadRequest, NotFound, not_ready, service_route
from sarl_services.metrics import EmbeddingMetrics

#: The served name of the bundled model (the name clients send as ``model``).
BUNDLED_NAME = "all-MiniLM-L6-v2"
_PREFIXES = ("", "/openai")
# Distinct strings per encode job (a multiple of the default batch size): requests of up to this
# many strings are encoded in one call, exactly as before chunking.
_CHUNK = 256


@dataclass(frozen=True)
class EmbeddingSettings:
    """Settings of ``sarl serve embedding`` (parsed by the CLI command)."""

    model: str = DEFAULT_LOCAL_MODEL  # bundled model, or a sentence-transformers directory
    served_name: str | None = None  # default: all-MiniLM-L6-v2, or the directory's name
    device: str = "cpu"
    batch_size: int = 64  # strings per forward pass
    max_inputs: int = 2048  # strings per request
    max_input_chars: int = 1_000_000  # characters per request, all inputs together
    max_body_bytes: int = 16 * 2**20

    def __post_init__(self) -> None:
        for option in ("batch_size", "max_inputs", "max_input_chars", "max_body_bytes"):
            value = getattr(self, option)
            if value < 1:
                raise ValueError(f"--{option.replace('_', '-')}: must be >= 1, got {value}")

    @property
    def name(self) -> str:
        if self.served_name:
            return self.served_name
        return BUNDLED_NAME if self.model == DEFAULT_LOCAL_MODEL else Path(self.model).name


@dataclass(frozen=True)
class EmbeddingRequest:
    """A validated embeddings request."""

    inputs: list[str]
    encoding_format: str  # "float" | "base64"


def check_inputs(raw: Any, field: str, settings: EmbeddingSettings) -> list[str]:
    """The strings to embed, within the per-request limits; 400 naming ``field`` otherwise.
    Shared by ``/v1/embeddings`` (``input``) and KServe V1 ``:predict`` (``instances``)."""
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list):
        raise BadRequest(
            f"'{field}' is required and must be a string or a list of strings", param=field
        )
    if not inputs:
        raise BadRequest(f"'{field}' must not be an empty list", param=field)
    if len(inputs) > settings.max_inputs:
        raise BadRequest(
            f"'{field}' has {len(inputs)} items; the limit is {settings.max_inputs} per request",
            param=field,
        )
    for i, text in enumerate(inputs):
        # Token-id arrays are valid OpenAI input, but nothing in sarl sends them.
        if not isinstance(text, str):
            raise BadRequest(
                f"{field}[{i}] must be a string, got {type(text).__name__}", param=field
            )
        if not text:
            raise BadRequest(f"{field}[{i}] must not be an empty string", param=field)
    chars = sum(len(t) for t in inputs)
    if chars > settings.max_input_chars:
        raise BadRequest(
            f"'{field}' has {chars} characters; the limit is {settings.max_input_chars} per "
            "request",
            param=field,
        )
    return inputs


def parse_embedding_request(
    payload: dict[str, Any], *, served_name: str, dim: int, settings: EmbeddingSettings
) -> EmbeddingRequest:
    """Validate a decoded request body; errors are 400 (404 for another model) naming the field."""
    model = payload.get("model", served_name)
    if not isinstance(model, str):
        raise BadRequest("'model' must be a string", param="model")
    if model != served_name:
        raise NotFound(
            f"model {model!r} does not exist; this server serves {served_name!r}", param="model"
        )
    inputs = check_inputs(payload.get("input"), "input", settings)
    fmt = payload.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise BadRequest("'encoding_format' must be 'float' or 'base64'", param="encoding_format")
    dims = payload.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or dims != dim):
        # A model trained without Matryoshka loss has no meaningful shorter embedding (vLLM
        # refuses too); the full dimension is accepted so clients may state it.
        raise BadRequest(
            f"'dimensions' must be {dim} (this model cannot shorten embeddings)", param="dimensions"
        )
    return EmbeddingRequest(inputs=inputs, encoding_format=fmt)


class EmbeddingModel(kserve.Model):  # type: ignore[misc]  # kserve ships no type hints
    """The KServe model: ``load()`` loads the sentence-transformers model, then sets ``ready``."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        super().__init__(settings.name)
        self.settings = settings
        self.model_path = resolve_model_path(settings.model)  # fails fast on a bad path
        self.dim = 0
        self.created = int(time.time())
        self._model: Any = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode")

    def load(self) -> bool:
        # Never reach for the Hugging Face hub: the model is on disk or the load fails.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(self.model_path), device=self.settings.device)
        self._model = model
        self.dim = int(self.encode(["warm-up"])[0].shape[1])  # first call pays one-off costs
        self.ready = True
        return True

    def encode(self, texts: list[str]) -> tuple[FloatArray, list[int]]:
        """Unit-norm ``(len(texts), dim)`` float32 rows and each text's token count (blocking)."""
        unique = list(dict.fromkeys(texts))
        vectors, tokens = self._encode_unique(unique)
        rows = _rows(texts, unique)
        return vectors[rows], [tokens[r] for r in rows]

    def _encode_unique(self, unique: list[str]) -> tuple[FloatArray, list[int]]:
        raw = self._model.encode(
            unique,
            batch_size=self.settings.batch_size,
            convert_to_numpy=True,
            show_progress_bar=False,
            normalize_embeddings=False,
        )  # (unique, dim)
        # The same normalisation as LocalEmbedder, so both give the same vectors.
        unit = normalize_rows(raw, source=f"model {self.name}")
        # usage.prompt_tokens as vLLM reports it: tokens per input after truncation.
        tokenize = self._model.tokenizer
        ids = tokenize(unique, truncation=True, max_length=self._model.max_seq_length)["input_ids"]
        return unit, [len(i) for i in ids]

    async def aencode(self, texts: list[str]) -> tuple[FloatArray, list[int]]:
        """:meth:`encode` on the model's single worker thread, ``_CHUNK`` distinct strings per
        job: requests take turns between jobs, and a cancelled request (its client gone) starts
        no further job — a job still queued is dropped from the executor."""
        unique = list(dict.fromkeys(texts))
        loop = asyncio.get_running_loop()
        parts: list[FloatArray] = []
        tokens: list[int] = []
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            vectors, counts = await loop.run_in_executor(self._executor, self._encode_unique, chunk)
            parts.append(vectors)  # (len(chunk), dim)
            tokens += counts
        rows = _rows(texts, unique)
        return np.concatenate(parts)[rows], [tokens[r] for r in rows]


def _rows(texts: list[str], unique: list[str]) -> list[int]:
    position = {t: i for i, t in enumerate(unique)}
    return [position[t] for t in texts]


def embedding_body(name: str, vectors: FloatArray, tokens: list[int], fmt: str) -> bytes:
    """vLLM's response body for ``vectors`` (one row per input, in input order)."""
    if fmt == "base64":  # little-endian float32, as OpenAI and vLLM encode it
        rows: list[Any] = [
            base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors
        ]
    else:
        rows = list(vectors)  # orjson writes float32 rows natively (shortest round-trip form)
    total = sum(tokens)
    body = {
        "id": f"embd-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": name,
        "data": [
            {"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)
        ],
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def build_router(model: EmbeddingModel, metrics: EmbeddingMetrics) -> APIRouter:
    """The OpenAI-compatible routes, with and without the ``/openai`` prefix."""
    settings = model.settings

    def observe(_: Request, status: int, __: str | None, seconds: float) -> None:
        metrics.requests.labels(status=str(status)).inc()
        metrics.latency.observe(seconds)

    async def create_embedding(request: Request) -> Response:
        if not model.ready:
            raise not_ready(f"model {model.name!r}")
        payload = await read_json_object(request, settings.max_body_bytes)
        parsed = parse_embedding_request(
            payload, served_name=model.name, dim=model.dim, settings=settings
        )
        vectors, tokens = await unless_disconnected(request, model.aencode(parsed.inputs))
        metrics.texts.inc(len(parsed.inputs))
        body = embedding_body(model.name, vectors, tokens, parsed.encoding_format)
        return Response(body, media_type="application/json")

    async def predict(model_name: str, request: Request) -> Response:
        """KServe V1: ``{"instances": [str, ...]}`` -> ``{"predictions": [[float]]}``, under the
        same body, count and size limits as ``/v1/embeddings`` (KServe's own route had none)."""
        if model_name != model.name:
            raise NotFound(
                f"model {model_name!r} does not exist; this server serves {model.name!r}",
                param="model_name",
            )
        if not model.ready:
            raise not_ready(f"model {model.name!r}")
        payload = await read_json_object(request, settings.max_body_bytes)
        instances = check_inputs(payload.get("instances"), "instances", settings)
        vectors, _ = await unless_disconnected(request, model.aencode(instances))
        metrics.texts.inc(len(instances))
        body = orjson.dumps({"predictions": vectors}, option=orjson.OPT_SERIALIZE_NUMPY)
        return Response(body, media_type="application/json")

    async def list_models() -> Response:
        card = {
            "id": model.name,
            "object": "model",
            "created": model.created,
            "owned_by": "sarl",
            "root": model.name,  # the served name: the server's file system is not the client's
            "ready": model.ready,
        }
        body = {"object": "list", "data": [card], "models": [model.name]}
        return Response(orjson.dumps(body), media_type="application/json")

    router = APIRouter(route_class=service_route())
    metered = service_route(observe)
    for prefix in _PREFIXES:
        router.add_api_route(
            f"{prefix}/v1/embeddings",
            create_embedding,
            methods=["POST"],
            route_class_override=metered,
        )
        router.add_api_route(f"{prefix}/v1/models", list_models, methods=["GET"])
    router.add_api_route(
        "/v1/models/{model_name}:predict",
        predict,
        methods=["POST"],
        route_class_override=metered,
    )
    return router


def serve_embedding(
    model: EmbeddingModel, *, host: str, port: int, load_delay_s: float = 0.0
) -> None:
    """Serve ``model`` with its routes and metrics until stopped (called by ``sarl serve``)."""
    from sarl_services.server import serve

    serve(
        model,
        build_router(model, EmbeddingMetrics.create()),
        host=host,
        port=port,
        load_delay_s=load_delay_s,
    )
