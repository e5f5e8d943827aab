"""The LLM-judge process reward R_judge (Structured Q&A §3.3, eq. 3) and its chat client.

Called by the ``structured_qa`` reward adapter (``reward.py``), which sends every judgeable
trajectory of a batch through one :meth:`ChatJudge.ajudge_many` call.

* Pure part: :func:`judge_reward` (eq. 3), :func:`is_judgeable`, :func:`render_prompt` (the
  template ``prompts/judge.txt``) and :func:`parse_judgements` (the judge's JSON reply).
* :class:`ChatJudge`: ONE ``POST {base}/v1/chat/completions`` per trajectory (temperature 0), at
  most ``max_concurrency`` in flight per event loop. Timeouts, connection errors, HTTP 408/429/5xx
  and malformed replies (not JSON, wrong shape, wrong pair count, scores outside {-1, 0, 1}) are
  retried up to ``max_retries`` times after capped exponential backoff with full jitter; other
  HTTP errors (400, 401, 404: configuration, not luck) are not retried. A trajectory the judge
  could not score gets the documented neutral outcome — R_judge = 0 and ``failed`` — is logged as
  a warning and counted in :class:`JudgeStats` ``failures`` (the adapter reports it as the
  ``judge_failed`` component, so trainers log its batch mean). The paper handles judge failures
  the same way ("retries, and neutral-on-failure scoring", §6). Judge errors never raise;
  programming errors do.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any
from urllib.parse import urlsplit

import httpx

from sarl.http import retry
from sarl.http.chat import message_content
from sarl.http.serving_auth import serving_api_key
from sarl.rewards.structured_qa.parsing import ParsedResponse, QAPair
from sarl.rewards.text import encodable

_LOG = logging.getLogger(__name__)

API_KEY_ENV = "SARL_JUDGE_API_KEY"
SCORES = (-1, 0, 1)
_FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)```", re.DOTALL)
# "+1" is not JSON, but judges write it; accept it where a value starts.
_PLUS = re.compile(r"([:\[,]\s*)\+(\d)")


@dataclass(frozen=True, slots=True)
class PairJudgement:
    """The judge's scores of one pair: relevance ρ_i and quality κ_i, each in {-1, 0, 1}."""

    relevance: int
    quality: int


def judge_reward(judgements: Sequence[PairJudgement]) -> float:
    """R_judge(τ) = (1/N) Σ_i (ρ_i + κ_i) / 2 ∈ [-1, 1], Structured Q&A eq. (3).

    N = 0 (no valid pairs) gives 0, as the paper prescribes for traces without valid pairs.
    """
    if not judgements:
        return 0.0
    return math.fsum((j.relevance + j.quality) / 2 for j in judgements) / len(judgements)


def is_judgeable(parsed: ParsedResponse) -> bool:
    """Whether the judge is consulted: a complete think block with at least one valid pair.

    The judge receives the problem and the think block (§3.3); without either there is nothing to
    grade and R_judge = 0. This also makes R_judge = 0 whenever a correct answer misses R_format,
    which the dominance bound relies on (``verifiable.dominance_bound``).
    """
    return parsed.has_think and parsed.n_pairs > 0


@functools.cache
def default_template() -> str:
    """The packaged judge prompt (``prompts/judge.txt``), read once on first use."""
    path = resources.files("sarl.rewards.structured_qa") / "prompts" / "judge.txt"
    return path.read_text(encoding="utf-8")


def render_prompt(template: str, problem: str, pairs: Sequence[QAPair]) -> str:
    """Fill ``$problem``, ``$pairs`` (numbered ASK/REFLECT blocks) and ``$n_pairs``."""
    blocks = "\n\n".join(
        f"Pair {i}\nASK: {p.question}\nREFLECT: {p.reflection}" for i, p in enumerate(pairs, 1)
    )
    return Template(template).substitute(problem=problem.strip(), pairs=blocks, n_pairs=len(pairs))


class MalformedReply(ValueError):
    """The judge's reply holds no usable judgement of every pair."""


def _find_judgement(content: str) -> Any | None:
    """The first JSON value that looks like the judgement — an object with ``pairs`` or a list of
    objects — in code fences first, then anywhere in the text (so leading prose and trailing text
    are skipped); None if there is none."""
    decoder = json.JSONDecoder()
    for text in [m.group(1) for m in _FENCE.finditer(content)] + [content]:
        text = _PLUS.sub(r"\1\2", text)
        for start in (i for i, ch in enumerate(text) if ch in "{["):
            try:
                value, _ = decoder.raw_decode(text, start)
            except (ValueError, RecursionError):  # RecursionError: nested deeper than Python goes
                continue
            if isinstance(value, dict) and "pairs" in value:
                return value
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                return value
    return None


def _score(item: dict[str, Any], key: str, position: int) -> int:
    value = item.get(key)
    # bool is an int subclass; `true` is not a score. 1.0 is harmless and judges emit it.
    if isinstance(value, bool) or not isinstance(value, int | float) or value not in SCORES:
        raise MalformedReply(f"pair entry {position} has {key}={value!r}, not one of -1, 0, 1")
    return int(value)


def parse_judgements(content: str, n_pairs: int) -> tuple[PairJudgement, ...]:
    """The ``n_pairs`` judgements in a reply, in pair order; :class:`MalformedReply` otherwise.

    Accepts ``{"pairs": [...]}`` or a bare list, inside code fences or surrounded by text. Each
    entry needs integer ``relevance`` and ``quality`` in {-1, 0, 1}; if entries carry ``pair``
    numbers they must be 1..N, each once, and set the order. A count other than N is malformed.
    """
    value = _find_judgement(content)
    if value is None:
        snippet = " ".join(content.split())[:80]
        raise MalformedReply(f"no JSON judgement found in {snippet!r}")
    items = value["pairs"] if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise MalformedReply("'pairs' is not a list")
    if len(items) != n_pairs:
        raise MalformedReply(f"{len(items)} judgements for {n_pairs} pairs")
    if not all(isinstance(item, dict) for item in items):
        raise MalformedReply("a pair entry is not an object")
    judgements = [
        PairJudgement(_score(item, "relevance", i), _score(item, "quality", i))
        for i, item in enumerate(items, 1)
    ]
    numbers = [item.get("pair") for item in items]
    if all(number is None for number in numbers):
        return tuple(judgements)
    numbered = all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)
    if not numbered or sorted(numbers) != list(range(1, n_pairs + 1)):
        raise MalformedReply(f"pair numbers {numbers} are not 1..{n_pairs}, each once")
    return tuple(judgements[i] for i in sorted(range(n_pairs), key=lambda i: numbers[i]))


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """One trajectory to judge: the problem text and its valid pairs."""

    problem: str
    pairs: tuple[QAPair, ...]


@dataclass(frozen=True, slots=True)
class JudgeOutcome:
    """R_judge of one trajectory, or the neutral outcome (reward 0, ``failed``) with the cause."""

    reward: float
    judgements: tuple[PairJudgement, ...]
    failed: bool
    attempts: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class JudgeStats:
    """Cumulative counters of one :class:`ChatJudge` since it was built."""

    requests: int  # HTTP requests attempted, retries included
    retries: int  # attempts after the first, per trajectory
    judged: int  # trajectories scored by the judge
    failures: int  # trajectories given the neutral outcome (R_judge = 0, judge_failed = 1)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~50 ms; build it once, share it across calls and loops.
    return httpx.create_ssl_context()


def chat_url(base_url: str) -> str:
    """``http://h:p``, ``http://h:p/v1`` or the endpoint itself -> ``http://h:p/v1/chat/completions``
    (a path prefix such as KServe's ``/openai`` is kept)."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ValueError(f"url must be an http(s) URL with a host and no query, got {base_url!r}")
    path = parts.path.rstrip("/").removesuffix("/chat/completions").removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}/v1/chat/completions"


def _error_message(payload: dict[str, Any]) -> str | None:
    """The message of OpenAI's ``{"error": {...}}`` body (as a string), if it has one."""
    error = payload.get("error")
    return str(error["message"]) if isinstance(error, dict) and "message" in error else None


class ChatJudge:
    """Scores trajectories with an OpenAI-compatible chat model (vLLM, KServe, hosted APIs).

    ``base_url`` may end in ``/v1`` or be the full endpoint. ``api_key`` (a Bearer token)
    defaults to the ``SARL_JUDGE_API_KEY`` environment variable. Each request may take
    ``timeout_s`` in total; retries and the neutral outcome are described in the module
    docstring. No connection outlives an :meth:`ajudge_many` call, so there is nothing to close.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        api_key: str | None = None,
        template: str | None = None,
        max_concurrency: int = 20,
        max_tokens: int = 1024,
    ) -> None:
        self._url = chat_url(base_url)
        if not model.strip():
            raise ValueError("model must be a non-empty string")
        self._model = model
        if api_key is None:
            # Else the platform's served-model key, for a cluster-local service only.
            api_key = os.environ.get(API_KEY_ENV) or serving_api_key(self._url, os.environ)
        self._api_key = api_key
        if template is not None:
            # A broken custom template must fail here, not inside every judge call.
            try:
                render_prompt(template, "", [QAPair("?", ".")])
            except (KeyError, ValueError) as e:
                raise ValueError(
                    f"template: {type(e).__name__}: {e}; its placeholders are $problem, $pairs and "
                    "$n_pairs (write $$ for a literal $)"
                ) from e
        self._template = template
        if not (timeout_s > 0 and max_retries >= 0 and max_concurrency >= 1 and max_tokens >= 1):
            raise ValueError(
                "need timeout_s > 0, max_retries >= 0, max_concurrency >= 1, max_tokens >= 1"
            )
        if not 0 <= backoff_s <= max_backoff_s:
            raise ValueError(
                f"need 0 <= backoff_s <= max_backoff_s, got {backoff_s}, {max_backoff_s}"
            )
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._max_concurrency = max_concurrency
        self._max_tokens = max_tokens
        self._counters = retry.Counters("requests", "retries", "judged", "failures")
        # Sync callers run each batch on a fresh loop: one semaphore per loop, so concurrent
        # batches on one loop share the bound.
        self._semaphores = retry.LoopSemaphores(max_concurrency)

    @property
    def url(self) -> str:
        """The full endpoint, e.g. ``http://127.0.0.1:8000/v1/chat/completions``."""
        return self._url

    def __repr__(self) -> str:
        key = "<set>" if self._api_key else None
        return f"ChatJudge(url={self._url!r}, model={self._model!r}, api_key={key})"

    def stats(self) -> JudgeStats:
        """A snapshot of the cumulative counters (safe from any thread)."""
        return JudgeStats(**self._counters.snapshot())

    async def ajudge(self, problem: str, pairs: Sequence[QAPair]) -> JudgeOutcome:
        """Judge one trajectory (see :meth:`ajudge_many`)."""
        [outcome] = await self.ajudge_many([JudgeRequest(problem, tuple(pairs))])
        return outcome

    async def ajudge_many(self, requests: Sequence[JudgeRequest]) -> list[JudgeOutcome]:
        """One outcome per request, in order; judge failures give the neutral outcome, not errors.

        A request without pairs gets R_judge = 0 without a call (eq. 3 with N = 0).
        """
        if not any(r.pairs for r in requests):
            return [JudgeOutcome(0.0, (), failed=False, attempts=0) for _ in requests]
        template = self._template if self._template is not None else default_template()
        prompts = [render_prompt(template, r.problem, r.pairs) if r.pairs else "" for r in requests]
        semaphore = self._semaphores.current()
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        limits = httpx.Limits(max_connections=self._max_concurrency)
        client = httpx.AsyncClient(
            timeout=self._timeout_s, limits=limits, headers=headers, verify=_tls_context()
        )
        # _judge_one turns every judge failure into an outcome; only a bug can escape the group.
        async with client, asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(self._judge_one(client, semaphore, prompt, len(r.pairs)))
                for prompt, r in zip(prompts, requests, strict=True)
            ]
        return [task.result() for task in tasks]

    async def _judge_one(
        self, client: httpx.AsyncClient, semaphore: asyncio.Semaphore, prompt: str, n_pairs: int
    ) -> JudgeOutcome:
        if n_pairs == 0:
            return JudgeOutcome(0.0, (), failed=False, attempts=0)
        body = {
            "model": self._model,
            # Lone surrogates (a policy can write them) cannot be encoded as UTF-8 JSON.
            "messages": [{"role": "user", "content": encodable(prompt)}],
            "temperature": 0.0,
            "max_tokens": self._max_tokens,
        }
        attempt = 0
        while True:
            attempt += 1
            try:
                async with semaphore:  # held while a request is in flight, not while backing off
                    judgements = await self._attempt(client, body, n_pairs)
            except retry.Fatal as e:
                return self._neutral(e.cause, attempt)
            except retry.Retryable as e:
                if attempt > self._max_retries:
                    return self._neutral(e.cause, attempt)
                where = f"judge {self._url}"
                backoff = (self._backoff_s, self._max_backoff_s)
                delay = retry.announce_retry(_LOG, where, e, attempt, self._max_retries, *backoff)
                self._counters.bump(retries=1)
                await asyncio.sleep(delay)
                continue
            self._counters.bump(judged=1)
            return JudgeOutcome(
                judge_reward(judgements), judgements, failed=False, attempts=attempt
            )

    def _neutral(self, cause: str, attempts: int) -> JudgeOutcome:
        error = f"judge {self._url} {cause} after {attempts} attempt{'s' * (attempts > 1)}"
        _LOG.warning("%s; neutral outcome R_judge = 0 (judge_failed)", error)
        self._counters.bump(failures=1)
        return JudgeOutcome(0.0, (), failed=True, attempts=attempts, error=error)

    async def _attempt(
        self, client: httpx.AsyncClient, body: dict[str, Any], n_pairs: int
    ) -> tuple[PairJudgement, ...]:
        self._counters.bump(requests=1)
        response = await retry.post_once(client, self._url, body, self._timeout_s)
        status = response.status_code
        verdict = retry.classify_status(status)
        if verdict != "ok":
            message = retry.server_message(response, _error_message)
            if verdict == "retry":
                raise retry.Retryable(
                    f"answered HTTP {status}: {message}", retry.retry_after(response)
                )
            raise retry.Fatal(f"rejected the request with HTTP {status}: {message}")
        content = message_content(response.content)
        try:
            return parse_judgements(content, n_pairs)
        except MalformedReply as e:
            raise retry.Retryable(f"returned a malformed judgement: {e}") from e
