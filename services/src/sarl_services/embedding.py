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

The model runs on :mod:`sarl.embedding.encoders` (``--backend``: ONNX Runtime on CPU by default,
exported and checked against torch at first load, or torch), the same code as the in-process
embedder. Each request's distinct strings are tokenized once, on a thread of their own (the token
ids count ``usage`` and the work the request brings, and are what the model runs on), then
submitted to the :class:`~sarl_services.batching.Batcher`: it admits the request by expected
work or refuses it with 503 ``overloaded`` and ``Retry-After`` (:mod:`sarl_services.admission`,
``--deadline-s``), coalesces the pending strings of all requests into forward passes on the
single model thread (``--max-batch-size``, ``--max-batch-tokens``, ``--batch-wait-ms``), orders
requests by expected finish, and drops the pending strings of a request whose client has gone
(:mod:`sarl_services.disconnect`). torch or ONNX Runtime uses the cores this process may use
(:mod:`sarl_services.threads`, ``--torch-threads``).
"""

from __future__ import annotations

import asyncio
import base64
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kserve
import orjson
from fastapi import APIRouter, Request, Response

from sarl.embedding.base import FloatArray
from sarl.embedding.encoders import BACKENDS, Backend, SentenceEncoder
from sarl.embedding.factory import DEFAULT_LOCAL_MODEL
from sarl.embedding.loading import load_encoder
from sarl.embedding.local import resolve_model_path
from sarl_services.admission import Admission, Overloaded, RateEstimator
from sarl_services.batching import Batcher, BatchSettings
from sarl_services.body import BodyReader
from sarl_services.connections import ConnectionLimits
from sarl_services.disconnect import unless_disconnected
from sarl_services.errors import BadRequest, NotFound, not_ready, service_route
from sarl_services.metrics import EmbeddingMetrics
from sarl_services.threads import configure_threads

#: The served name of the bundled model (the name clients send as ``model``).
BUNDLED_NAME = "all-MiniLM-L6-v2"
_PREFIXES = ("", "/openai")
# Before load() measures the model, assume a slow CPU (tokens/s): too high would over-admit.
_PRIOR_TOKENS_PER_S = 500.0
# load() times one pass over these (distinct, ~20 tokens each) to seed the rate estimate.
_CALIBRATION = [
    f"Calibration step {i}: compute {i} times {i + 7} and check the sum." for i in range(32)
]


@dataclass(frozen=True)
class EmbeddingSettings:
    """Settings of ``sarl serve embedding`` (parsed by the CLI command)."""

    model: str = DEFAULT_LOCAL_MODEL  # bundled model, or a sentence-transformers directory
    served_name: str | None = None  # default: all-MiniLM-L6-v2, or the directory's name
    device: str = "cpu"
    backend: Backend = "auto"  # see sarl.embedding.encoders
    onnx_cache: str | None = None  # exported ONNX files; default $SARL_CACHE_DIR/onnx
    max_batch_size: int = 128  # strings per forward pass
    max_batch_tokens: int = 16384  # padded tokens (strings x longest) per forward pass
    batch_wait_ms: float = 5.0  # wait for more work when less than a pass is queued
    deadline_s: float = 10.0  # admission: expected completion past this gets 503
    torch_threads: int | None = None  # intra-op threads; None: the cores this process may use
    max_inputs: int = 2048  # strings per request
    max_input_chars: int = 1_000_000  # characters per request, all inputs together
    max_body_bytes: int = 16 * 2**20

    def __post_init__(self) -> None:
        for option in ("max_inputs", "max_input_chars", "max_body_bytes"):
            value = getattr(self, option)
            if value < 1:
                raise ValueError(f"--{option.replace('_', '-')}: must be >= 1, got {value}")
        if not (self.deadline_s > 0 and math.isfinite(self.deadline_s)):
            raise ValueError(
                f"--deadline-s: must be a number of seconds > 0, got {self.deadline_s}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"--backend: must be one of {', '.join(BACKENDS)}, got {self.backend!r}"
            )
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError(f"--torch-threads: must be >= 1, got {self.torch_threads}")
        _ = self.batching  # ValueError naming --max-batch-size, --max-batch-tokens, ...

    @property
    def name(self) -> str:
        if self.served_name:
            return self.served_name
        return BUNDLED_NAME if self.model == DEFAULT_LOCAL_MODEL else Path(self.model).name

    @property
    def batching(self) -> BatchSettings:
        return BatchSettings(
            max_batch_size=self.max_batch_size,
            max_batch_tokens=self.max_batch_tokens,
            batch_wait_s=self.batch_wait_ms / 1000,
        )


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
    """The KServe model: ``load()`` loads the sentence-transformers model, measures it, then sets
    ``ready``; :meth:`aencode` serves the routes through the batcher."""

    def __init__(self, settings: EmbeddingSettings, metrics: EmbeddingMetrics) -> None:
        super().__init__(settings.name)
        self.settings = settings
        self.metrics = metrics
        self.model_path = resolve_model_path(settings.model)  # fails fast on a bad path
        self.dim = 0
        self.created = int(time.time())
        self.encoder: SentenceEncoder | None = None  # set by load()
        self._tokenize = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")
        admission = Admission(
            settings.deadline_s,
            RateEstimator(_PRIOR_TOKENS_PER_S, prior_s=0.1),
            fair=True,
            unit="tokens",
        )
        self.batcher = Batcher(
            self._encode_pass, admission, settings.batching, on_batch=metrics.observe_batch
        )
        # Read through self.batcher at scrape time (tests swap in a batcher with a fake model).
        metrics.queued_texts.set_function(lambda: self.batcher.pending_texts)
        metrics.queued_tokens.set_function(lambda: self.batcher.admission.queued_work)
        metrics.expected_wait.set_function(lambda: self.batcher.admission.drain_s())
        metrics.rate.set_function(lambda: self.batcher.admission.rate.per_s)

    def load(self) -> bool:
        threads = configure_threads(self.settings.torch_threads)  # before any torch work
        cache = Path(self.settings.onnx_cache) if self.settings.onnx_cache else None
        self.encoder = encoder = load_encoder(
            self.model_path,
            backend=self.settings.backend,
            device=self.settings.device,
            threads=threads,
            cache_dir=cache,
        )
        self.dim = encoder.dim
        self._encode_pass([encoder.token_ids(["warm-up"])[0]])  # first call pays one-off costs
        ids = encoder.token_ids(_CALIBRATION)
        start = time.perf_counter()
        self._encode_pass(ids)
        self.batcher.admission.rate.observe(sum(map(len, ids)), time.perf_counter() - start)
        self.ready = True
        return True

    @property
    def backend(self) -> str:
        """The encoder's backend once loaded ("onnx" or "torch")."""
        return self.encoder.backend if self.encoder is not None else "not loaded"

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids, truncated (the tokenize thread)."""
        assert self.encoder is not None, "load() first"
        return self.encoder.token_ids(texts)

    def _encode_pass(self, ids: list[list[int]]) -> FloatArray:
        """Unit-norm ``(len(ids), dim)`` rows for one pass of the batcher (the model thread
        only): sorted by length, in the encoder's calls (``sarl.embedding.encoders``)."""
        assert self.encoder is not None, "load() first"
        return self.encoder.encode_ids(ids)

    async def aencode(self, texts: list[str]) -> tuple[FloatArray, list[int]]:
        """Unit-norm ``(len(texts), dim)`` rows and each text's token count, through the
        batcher (each distinct string once); :class:`~sarl_services.admission.Overloaded` when
        the request is not admitted."""
        unique = list(dict.fromkeys(texts))
        loop = asyncio.get_running_loop()
        # Tokens per text after truncation, as vLLM reports usage.prompt_tokens; the same ids
        # are what the model runs on.
        ids = await loop.run_in_executor(self._tokenize, self._token_ids, unique)
        tokens = [len(i) for i in ids]
        vectors = await self.batcher.submit(unique, tokens, ids)  # (unique, dim)
        rows = _rows(texts, unique)
        return vectors[rows], [tokens[r] for r in rows]


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


def build_router(model: EmbeddingModel) -> APIRouter:
    """The OpenAI-compatible routes, with and without the ``/openai`` prefix."""
    settings = model.settings
    metrics = model.metrics
    bodies = BodyReader(settings.max_body_bytes)  # one budget for the process's bodies

    def observe(_: Request, status: int, __: str | None, seconds: float) -> None:
        metrics.requests.labels(status=str(status)).inc()
        metrics.latency.observe(seconds)

    async def encode(texts: list[str]) -> tuple[FloatArray, list[int]]:
        try:
            return await model.aencode(texts)
        except Overloaded as e:
            metrics.shed.labels(reason=e.reason).inc()
            raise

    async def create_embedding(request: Request) -> Response:
        """OpenAI embeddings: ``{"model"?, "input": str | [str], "encoding_format"?: "float" |
        "base64", "dimensions"?}`` -> ``{"object": "list", "data": [{"object": "embedding",
        "index", "embedding"}], "model", "usage"}``, one row per input in input order."""
        if not model.ready:
            raise not_ready(f"model {model.name!r}")
        # The decoded request stays in the body budget until its rows are back: requests
        # waiting for a forward pass count against it (issue 38 item 3, as the reward service).
        async with bodies.json_object(request) as payload:
            parsed = parse_embedding_request(
                payload, served_name=model.name, dim=model.dim, settings=settings
            )
            vectors, tokens = await unless_disconnected(request, encode(parsed.inputs))
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
        async with bodies.json_object(request) as payload:  # in the budget until encoded
            instances = check_inputs(payload.get("instances"), "instances", settings)
            vectors, _ = await unless_disconnected(request, encode(instances))
        metrics.texts.inc(len(instances))
        body = orjson.dumps({"predictions": vectors}, option=orjson.OPT_SERIALIZE_NUMPY)
        return Response(body, media_type="application/json")

    async def list_models() -> Response:
        """OpenAI model list (``{"object": "list", "data": [card]}``) of the one served model,
        with KServe V1's ``"models": [name]`` beside it."""
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
    model: EmbeddingModel,
    *,
    host: str,
    port: int,
    load_delay_s: float = 0.0,
    connections: ConnectionLimits | None = None,
    api_key: str = "",
) -> None:
    """Serve ``model`` with its routes and metrics until stopped (called by ``sarl serve``)."""
    from sarl_services.server import serve

    serve(
        model,
        build_router(model),
        host=host,
        port=port,
        load_delay_s=load_delay_s,
        connections=connections,
        api_key=api_key,
    )
