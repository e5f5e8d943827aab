"""Embed steps through an OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, KServe HF runtime).

:class:`OpenAIEmbeddingClient` is the remote :class:`~sarl.embedding.base.AsyncEmbedder`. The
structure scorer's adapters call it with every step of every response in a batch; it sends each
distinct string once, in batches of ``batch_size`` with at most ``max_concurrency`` requests in
flight, retries transient failures with capped exponential backoff, and checks every reply before
trusting it: a failure raises :class:`~sarl.embedding.base.EmbeddingError`, never zeros or a
partial result. ``factory.make_embedder`` builds it from CLI/config settings; benchmarks and,
later, Prometheus metrics read its counters through :meth:`OpenAIEmbeddingClient.stats`.

Vectors travel as ``encoding_format: "base64"`` (each vector's little-endian float32 bytes, as
OpenAI, vLLM and sarl's embedding service send them): a quarter of the bytes of JSON numbers and
no float parsing, which was most of the client's time. A server that refuses base64 is asked
again in floats, and the client keeps using floats from then on.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import math
import os
import ssl
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import numpy as np
import numpy.typing as npt

from sarl.embedding.base import EmbeddingError, FloatArray, normalize_rows
from sarl.http.retry import (
    Counters,
    LoopSemaphores,
    Retryable,
    announce_retry,
    classify_status,
    post_once,
    retry_after,
    server_message,
)
from sarl.http.serving_auth import serving_api_key

_LOG = logging.getLogger(__name__)

API_KEY_ENV = "SARL_EMBEDDING_API_KEY"

EncodingFormat = Literal["base64", "float"]
ENCODING_FORMATS: tuple[EncodingFormat, ...] = ("base64", "float")
# How servers refuse a request field they do not support: 400 (OpenAI, vLLM) or 422 (FastAPI).
_REFUSAL_STATUSES = (400, 422)


@dataclass(frozen=True)
class EmbeddingClientStats:
    """Cumulative counters of one client since it was built."""

    requests: int  # HTTP requests attempted, retries included
    retries: int  # attempts after the first, per batch
    texts_in: int  # strings passed to embed/aembed
    texts_sent: int  # distinct strings requested (after de-duplication; resends not counted)
    failures: int  # embed/aembed calls that raised


@functools.cache
def _default_tls_context() -> ssl.SSLContext:
    """httpx's default TLS settings, built once per process.

    Loading the CA bundle takes ~50 ms, more than a small embedding request; an SSLContext is not
    tied to a loop or thread, so every call's AsyncClient shares this one.
    """
    return httpx.create_ssl_context()


def _endpoint_url(base_url: object) -> str:
    """Return the endpoint for ``base_url``: ``http://h:p``, ``http://h:p/v1`` (either with a
    trailing slash) or the endpoint itself all map to ``http://h:p/v1/embeddings``.
    A path prefix is kept (KServe serves OpenAI routes under ``/openai/v1``).
    """
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError(f"base_url must be a non-empty URL string, got {base_url!r}")
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be an http(s) URL with a host, got {base_url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"base_url must not have a query or fragment, got {base_url!r}")
    try:
        _ = parts.port  # raises for a non-numeric or out-of-range port
    except ValueError as e:
        raise ValueError(f"base_url has an invalid port, got {base_url!r}") from e
    path = parts.path.rstrip("/")
    if path.endswith("/v1/embeddings"):
        path = path.removesuffix("/embeddings")
    path = path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}/v1/embeddings"


def _int_param(name: str, value: object, minimum: int) -> int:
    # bool is an int subclass; True as a batch size is a bug, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _seconds_param(name: str, value: object, *, allow_zero: bool) -> float:
    seconds = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return seconds


def _is_transient(status: int) -> bool:
    # Unlike the chat clients, 408 is not retried here (it fails at once, like other 4xx).
    return status == 429 or status >= 500


def _parse_embeddings(content: bytes, expected: int) -> npt.NDArray[np.float64]:
    """Check a 200 body and return its embeddings as ``(expected, dim)`` in input order.

    Each item's ``embedding`` may be a list of numbers or base64 text (little-endian float32),
    whichever was asked for: some servers ignore ``encoding_format``. Problems raise
    :class:`Retryable` phrased to follow the URL ("... returned 3 embeddings for 4 inputs"): a
    truncated or garbled body is often a proxy or server hiccup worth retrying.
    """
    try:
        payload = json.loads(content)
    except ValueError as e:
        raise Retryable(f"returned a body that is not valid JSON ({e})") from e
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise Retryable("returned JSON without a 'data' list")
    if len(data) != expected:
        raise Retryable(f"returned {len(data)} embeddings for {expected} inputs")
    rows: list[npt.NDArray[Any] | None] = [None] * expected
    for position, item in enumerate(data):
        index = item.get("index") if isinstance(item, dict) else None
        # Order by the reply's own index; OpenAI does not promise list order matches input order.
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < expected:
            raise Retryable(f"returned data[{position}] without a valid 'index'")
        if rows[index] is not None:
            raise Retryable(f"returned index {index} more than once")
        rows[index] = _embedding_row(item.get("embedding"), position, index)
    filled = [row for row in rows if row is not None]  # all: indices are distinct and in range
    if len({row.shape[0] for row in filled}) > 1:
        raise Retryable("returned embeddings of different dimensions")
    array = np.stack(filled)  # (expected, dim)
    if array.shape[1] == 0:
        raise Retryable("returned embeddings that are not non-empty lists of numbers")
    if not np.all(np.isfinite(array)):
        raise Retryable("returned NaN or infinite embedding values")
    return array.astype(np.float64)  # (expected, dim)


def _embedding_row(embedding: object, position: int, index: int) -> npt.NDArray[Any]:
    """One item's ``embedding`` as a numeric ``(dim,)`` array, from base64 text or numbers."""
    if isinstance(embedding, str):
        return _decode_base64(embedding, position, index)
    if not isinstance(embedding, list):  # e.g. null
        raise Retryable(
            f"returned data[{position}] without an 'embedding' list of numbers or base64 text"
        )
    try:
        row = np.array(embedding)  # no dtype: strings, None or nesting must show up, not be cast
    except ValueError as e:  # ragged nesting
        raise Retryable("returned embeddings that are not non-empty lists of numbers") from e
    if row.ndim != 1:
        raise Retryable("returned embeddings that are not non-empty lists of numbers")
    if row.dtype.kind not in "iuf":
        raise Retryable("returned non-numeric embedding values")
    return row  # (dim,)


def _decode_base64(text: str, position: int, index: int) -> npt.NDArray[np.float32]:
    """Decode OpenAI's base64 embedding: little-endian float32 values, ``(dim,)``."""
    where = f"data[{position}] (index {index})"
    try:
        raw = base64.b64decode(text, validate=True)  # strict: stray characters are an error
    except ValueError as e:  # binascii.Error, or non-ASCII text
        raise Retryable(
            f"returned {where} with an 'embedding' that is not valid base64 ({e})"
        ) from e
    if not raw or len(raw) % 4:
        raise Retryable(
            f"returned {where} with a base64 'embedding' of {len(raw)} bytes, not a whole "
            "number of float32 values"
        )
    return np.frombuffer(raw, dtype="<f4")  # (dim,)


def _refuses_base64(response: httpx.Response) -> bool:
    """Whether an error reply says the server does not do ``encoding_format: "base64"``.

    The reply must name the field or the format (OpenAI/vLLM's error message, FastAPI's
    validation detail), so an unrelated 400 ("input is too long") still fails at once.
    """
    if response.status_code not in _REFUSAL_STATUSES:
        return False
    text = response.text[:4096].lower()
    return "encoding_format" in text or "base64" in text


def _dedupe(texts: Sequence[str]) -> tuple[list[str], npt.NDArray[np.intp]]:
    """Return the distinct strings in first-seen order and, per input, its distinct position."""
    # A lone str is a Sequence[str] too; embedding it character by character is never intended.
    if isinstance(texts, str | bytes):
        raise TypeError("texts must be a sequence of strings, not a single string")
    positions: dict[str, int] = {}
    inverse = np.empty(len(texts), dtype=np.intp)  # (n,)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
        inverse[i] = positions.setdefault(text, len(positions))
    return list(positions), inverse


class OpenAIEmbeddingClient:
    """An :class:`~sarl.embedding.base.AsyncEmbedder` backed by ``POST {base_url}/v1/embeddings``.

    ``base_url`` may be given with or without a trailing ``/v1``. ``api_key`` (sent as a Bearer
    token) defaults to the ``SARL_EMBEDDING_API_KEY`` environment variable. Each call sends every
    distinct string once, ``batch_size`` strings per request, with at most ``max_concurrency``
    requests in flight per event loop (concurrent calls on one loop share the bound). Each request
    may take ``timeout_s`` in total. Connection errors, timeouts, HTTP 429 and 5xx and malformed
    200 replies are retried up to ``max_retries`` times after exponential backoff with full jitter
    (base ``backoff_s``, capped at ``max_backoff_s``; a numeric ``Retry-After`` is honoured up to
    the cap); other HTTP errors fail at once. ``dimensions`` is passed to models that can shorten
    their embeddings. ``encoding_format`` is how vectors are asked for: ``"base64"`` (compact and
    fast to decode) unless the server refuses it with a 400/422 naming the field, in which case
    that request is repeated in ``"float"`` and, once floats work, every later request of this
    client asks for floats (requests already in flight then may be refused and repeated too).

    No connection outlives a call (see :meth:`aembed`), so there is nothing to close.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        batch_size: int = 128,
        max_concurrency: int = 4,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        dimensions: int | None = None,
        encoding_format: EncodingFormat = "base64",
    ) -> None:
        self._url = _endpoint_url(base_url)
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        self._model = model
        if api_key is None:
            # Else the platform's served-model key, for a cluster-local service only.
            api_key = os.environ.get(API_KEY_ENV) or serving_api_key(self._url, os.environ)
        elif not isinstance(api_key, str) or not api_key.strip():
            # Only malformed values are echoed; a real key never ends up in a message or log.
            raise ValueError(f"api_key must be a non-empty string or None, got {api_key!r}")
        self._api_key = api_key
        self._batch_size = _int_param("batch_size", batch_size, 1)
        self._max_concurrency = _int_param("max_concurrency", max_concurrency, 1)
        self._timeout_s = _seconds_param("timeout_s", timeout_s, allow_zero=False)
        self._max_retries = _int_param("max_retries", max_retries, 0)
        self._backoff_s = _seconds_param("backoff_s", backoff_s, allow_zero=True)
        self._max_backoff_s = _seconds_param("max_backoff_s", max_backoff_s, allow_zero=True)
        if self._max_backoff_s < self._backoff_s:
            raise ValueError(
                f"max_backoff_s must be >= backoff_s ({self._backoff_s:g}), got {max_backoff_s!r}"
            )
        self._dimensions = None if dimensions is None else _int_param("dimensions", dimensions, 1)
        if encoding_format not in ENCODING_FORMATS:
            raise ValueError(
                f"encoding_format must be one of {ENCODING_FORMATS}, got {encoding_format!r}"
            )
        # Switched to "float" (from any thread: a str assignment is atomic) when a server
        # refuses base64; never switched back.
        self._encoding_format: EncodingFormat = encoding_format
        self._counters = Counters("requests", "retries", "texts_in", "texts_sent", "failures")
        # embed() runs calls on fresh event loops: one semaphore per loop.
        self._semaphores = LoopSemaphores(self._max_concurrency)

    @property
    def url(self) -> str:
        """The full endpoint URL, e.g. ``http://127.0.0.1:8080/v1/embeddings``."""
        return self._url

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    @property
    def encoding_format(self) -> EncodingFormat:
        """How the next request asks for vectors: ``"base64"``, or ``"float"`` after a refusal."""
        return self._encoding_format

    def __repr__(self) -> str:
        key = "<set>" if self._api_key else None
        return (
            f"OpenAIEmbeddingClient(url={self._url!r}, model={self._model!r}, api_key={key}, "
            f"batch_size={self._batch_size}, max_concurrency={self._max_concurrency})"
        )

    def stats(self) -> EmbeddingClientStats:
        """A snapshot of the cumulative counters (safe to call from any thread)."""
        return EmbeddingClientStats(**self._counters.snapshot())

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Blocking :meth:`aembed`; also safe to call from inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.aembed(texts))
        # This thread already runs a loop (a sync reward function called from async code):
        # asyncio.run would refuse, and waiting on that loop from inside it would deadlock. So the
        # call gets a private thread and loop; it blocks the caller's loop meanwhile, which is
        # what a sync call means. Async callers should await aembed() instead.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sarl-embed") as pool:
            return pool.submit(lambda: asyncio.run(self.aembed(texts))).result()

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        """Return ``(len(texts), dim)`` float32 unit-norm rows in input order (``(0, 0)`` if empty).

        Raises :class:`EmbeddingError` naming the URL and the cause when the server cannot give a
        complete, well-formed answer; ``TypeError`` if ``texts`` is not a sequence of strings.
        """
        unique, inverse = _dedupe(texts)
        self._counters.bump(texts_in=len(inverse), texts_sent=len(unique))
        if not unique:
            return np.zeros((0, 0), dtype=np.float32)
        try:
            vectors = normalize_rows(await self._embed_unique(unique), source=self._url)
        except Exception:  # CancelledError is a BaseException: a cancelled call is not a failure
            self._counters.bump(failures=1)
            raise
        return vectors[inverse]  # (len(texts), dim)

    async def _embed_unique(self, unique: list[str]) -> npt.NDArray[np.float64]:
        """Embed distinct strings batch by batch, concurrently; ``(len(unique), dim)``."""
        size = self._batch_size
        batches = [unique[i : i + size] for i in range(0, len(unique), size)]
        semaphore = self._semaphores.current()
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        limits = httpx.Limits(max_connections=self._max_concurrency)
        # A fresh AsyncClient per call: an httpx client is tied to the event loop it first runs
        # on, and embed() gives every call a new loop. Opening a few keep-alive connections per
        # call costs little next to embedding a batch, and nothing is left open between calls.
        async with httpx.AsyncClient(
            timeout=self._timeout_s, limits=limits, headers=headers, verify=_default_tls_context()
        ) as client:
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [
                        group.create_task(self._post_batch(client, semaphore, b)) for b in batches
                    ]
            except ExceptionGroup as group_error:
                # The first failing batch cancels the rest; report it as a plain EmbeddingError.
                errors = [e for e in group_error.exceptions if isinstance(e, EmbeddingError)]
                if len(errors) != len(group_error.exceptions):
                    raise
                raise errors[0] from errors[0].__cause__
        parts = [task.result() for task in tasks]  # each (len(batch), dim)
        dims = sorted({part.shape[1] for part in parts})
        if len(dims) > 1:
            raise EmbeddingError(
                f"{self._url} returned different dimensions across batches: {dims}"
            )
        return np.concatenate(parts)  # (len(unique), dim)

    async def _post_batch(
        self, client: httpx.AsyncClient, semaphore: asyncio.Semaphore, batch: list[str]
    ) -> npt.NDArray[np.float64]:
        """Send one batch, retrying transient failures; ``(len(batch), dim)``."""
        attempts = self._max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                async with semaphore:  # held only while a request is in flight, not while waiting
                    return await self._attempt(client, batch)
            except Retryable as e:
                last = e
            if attempt < attempts:
                delay = announce_retry(
                    _LOG,
                    self._url,
                    last,
                    attempt,
                    self._max_retries,
                    self._backoff_s,
                    self._max_backoff_s,
                )
                self._counters.bump(retries=1)
                await asyncio.sleep(delay)
        raise EmbeddingError(
            f"{self._url} {last.cause}; gave up after {attempts} attempt{'s' * (attempts > 1)} "
            f"(max_retries={self._max_retries})"
        ) from last

    def _body(self, batch: list[str], encoding_format: EncodingFormat) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "input": batch,
            "encoding_format": encoding_format,
        }
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        return body

    async def _attempt(
        self, client: httpx.AsyncClient, batch: list[str]
    ) -> npt.NDArray[np.float64]:
        """Send one request (two if base64 is refused); transient failures raise
        :class:`Retryable`, others EmbeddingError."""
        encoding_format = self._encoding_format
        self._counters.bump(requests=1)
        response = await post_once(
            client, self._url, self._body(batch, encoding_format), self._timeout_s
        )
        if encoding_format == "base64" and _refuses_base64(response):
            refusal = f"HTTP {response.status_code}: {server_message(response)}"
            self._counters.bump(requests=1)
            response = await post_once(
                client, self._url, self._body(batch, "float"), self._timeout_s
            )
            if response.status_code == 200 and self._encoding_format == "base64":
                self._encoding_format = "float"
                _LOG.warning(
                    "%s refused encoding_format 'base64' (%s); asking for floats from now on",
                    self._url,
                    refusal,
                )
        status = response.status_code
        verdict = classify_status(status, transient=_is_transient)
        if verdict == "retry":
            message = server_message(response)
            raise Retryable(f"answered HTTP {status}: {message}", retry_after(response))
        if verdict == "fatal":
            raise EmbeddingError(
                f"{self._url} rejected the request with HTTP {status}: "
                f"{server_message(response)} (not retried)"
            )
        return _parse_embeddings(response.content, len(batch))
