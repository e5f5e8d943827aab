"""A small synchronous client for an OpenAI-compatible ``/v1/chat/completions`` endpoint.

Used by ``sarl.rewards.rlkd.gsrm`` for the decomposer and the judge (vLLM, KServe, any
OpenAI-compatible server). One request per call; calls may come from many threads at once (the
reward scores samples concurrently) and share one connection pool.

Failure handling: every request has a timeout; connection errors, timeouts, HTTP 408/429/5xx and
malformed 200 bodies are retried up to ``max_retries`` times with capped exponential backoff
(a numeric ``Retry-After`` is honoured, capped); other 4xx are not retried. When the attempts
are used up :class:`ChatError` is raised: the caller decides the outcome (the RLKD reward's
``on_failure`` setting). Every attempt, retry, timeout and failure is counted
(:meth:`ChatClient.stats`). Lone surrogates in messages are sent as U+FFFD
(``sarl.rewards.text``): UTF-8 JSON cannot carry them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sarl.http.chat import message_content
from sarl.http.retry import (
    Counters,
    Retryable,
    backoff_delay,
    classify_status,
    one_line,
    retry_after,
)
from sarl.http.serving_auth import serving_api_key
from sarl.rewards.text import encodable

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_MAX_BACKOFF_S = 30.0


class ChatEndpointSettings(BaseModel):
    """Where and how to call one chat model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(
        description="Base URL of the OpenAI-compatible server, e.g. http://judge:8000 or "
        "http://judge:8000/v1 (the /v1/chat/completions path is appended)."
    )
    model: str = Field(description="Model name sent in the request.")
    api_key_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding a bearer token (never the token).",
    )
    timeout_seconds: float = Field(default=60.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(default=2, ge=0, le=10, description="Retries after the first try.")
    backoff_seconds: float = Field(
        default=0.5, ge=0, description="First retry delay; doubles per retry, capped at 30 s."
    )
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        chat_url(value)
        return value


def chat_url(base_url: str) -> str:
    """``http://h:p``, ``http://h:p/v1`` or the full endpoint -> ``.../v1/chat/completions``."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL with a host, got {base_url!r}")
    path = parts.path.rstrip("/").removesuffix("/chat/completions").removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}/v1/chat/completions"


class ChatError(RuntimeError):
    """A chat call failed after all its attempts; the message names the endpoint and cause."""


@dataclass(frozen=True, slots=True)
class ChatStats:
    """Cumulative counters of one client."""

    calls: int  # complete() calls
    requests: int  # HTTP attempts, retries included
    retries: int
    timeouts: int  # attempts that timed out
    failures: int  # calls that raised ChatError


class ChatClient:
    """Thread-safe client of one chat endpoint (settings in :class:`ChatEndpointSettings`)."""

    def __init__(
        self, settings: ChatEndpointSettings, *, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.settings = settings
        self._url = chat_url(settings.url)
        headers = {"Content-Type": "application/json"}
        if settings.api_key_env:
            token = os.environ.get(settings.api_key_env)
            if not token:
                raise ValueError(
                    f"api_key_env: environment variable {settings.api_key_env!r} is not set"
                )
            headers["Authorization"] = f"Bearer {token}"
        elif served_key := serving_api_key(self._url, os.environ):
            # A model the platform serves (cluster-local): the tenant's served-model key.
            headers["Authorization"] = f"Bearer {served_key}"
        self._http = httpx.Client(
            headers=headers, timeout=httpx.Timeout(settings.timeout_seconds), transport=transport
        )
        self._counters = Counters("calls", "requests", "retries", "timeouts", "failures")

    def __repr__(self) -> str:
        return f"ChatClient({self._url!r}, model={self.settings.model!r})"

    def stats(self) -> ChatStats:
        return ChatStats(**self._counters.snapshot())

    def complete(
        self, messages: Sequence[Mapping[str, str]], *, max_tokens: int | None = None
    ) -> str:
        """The assistant message text of one completion; :class:`ChatError` after all tries."""
        self._counters.bump(calls=1)
        body: dict[str, Any] = {
            "model": self.settings.model,
            # Lone surrogates (a policy can write them) cannot be encoded as UTF-8 JSON.
            "messages": [{k: encodable(v) for k, v in m.items()} for m in messages],
            "temperature": self.settings.temperature,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        last = "no attempt made"
        for attempt in range(self.settings.max_retries + 1):
            if attempt:
                self._counters.bump(retries=1)
            self._counters.bump(requests=1)
            try:
                return self._attempt(body)
            except Retryable as e:
                last = e.cause
                if attempt == self.settings.max_retries:
                    break
                base_s = self.settings.backoff_seconds
                # No jitter: the wait doubles per retry from backoff_seconds, capped at 30 s.
                time.sleep(
                    backoff_delay(attempt + 1, base_s, _MAX_BACKOFF_S, e.retry_after, jitter=False)
                )
            except ChatError:
                self._counters.bump(failures=1)
                raise
        self._counters.bump(failures=1)
        tries = self.settings.max_retries + 1
        raise ChatError(f"chat endpoint {self._url}: {last} ({tries} attempt(s))")

    def _attempt(self, body: dict[str, Any]) -> str:
        try:
            response = self._http.post(self._url, json=body)
        except httpx.TimeoutException as e:
            self._counters.bump(timeouts=1)
            raise Retryable(f"timed out after {self.settings.timeout_seconds} s") from e
        except httpx.TransportError as e:
            raise Retryable(f"transport error: {type(e).__name__}: {e}") from e
        verdict = classify_status(response.status_code, transient=_RETRY_STATUS.__contains__)
        if verdict == "retry":
            raise Retryable(
                f"HTTP {response.status_code}: {one_line(response.text)}", retry_after(response)
            )
        if verdict == "fatal":
            raise ChatError(
                f"chat endpoint {self._url}: HTTP {response.status_code}: {one_line(response.text)}"
            )
        return message_content(response.content)

    def close(self) -> None:
        self._http.close()
