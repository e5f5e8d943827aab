"""Registry entry ``"structured_qa"``: the Structured Q&A composite reward R = R_verif + λ·R_judge.

Imported lazily by ``sarl.rewards.registry``; used by the adapters (TRL, verl, reward service). A
thin adapter over the pure scorers: ``parsing.py`` and ``verifiable.py`` compute R_verif (eq. 2)
per sample, ``judge.py`` scores every judgeable trajectory of the batch with one concurrent batch
of judge calls (eq. 3), and :func:`~sarl.rewards.structured_qa.verifiable.total_reward` combines
them (eq. 1). Paper: Jamwal & Bhat, "Structured Q&A Reasoning for Language Models", §3.

Training algorithm: the paper optimises with RLOO (§3.4, eq. 4). That is chosen in the Experiment
spec, not here (``algorithm.name: rloo``, supported by the local TRL runner); this reward only
supplies R(τ), and RLOO's leave-one-out baseline is computed by the trainer from the group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import register_reward
from sarl.rewards.structured_qa.judge import (
    ChatJudge,
    JudgeOutcome,
    JudgeRequest,
    JudgeStats,
    is_judgeable,
)
from sarl.rewards.structured_qa.verifiable import (
    VerifiableConfig,
    VerifiableResult,
    dominance_bound,
    dominance_holds,
    score_verifiable,
    total_reward,
)

COMPONENT_KEYS = (
    "r_correct",
    "r_format",
    "r_length",
    "r_qa",
    "r_judge",
    "n_pairs",
    "judge_failed",
)
_T = TypeVar("_T")


class JudgeClientSettings(BaseModel):
    """Where and how to call the judge: an OpenAI-compatible chat server (API key in the
    ``SARL_JUDGE_API_KEY`` environment variable, never in settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = Field(
        default=None,
        description="Base URL of the chat server, e.g. http://judge:8000 (with or without /v1).",
    )
    model: str | None = Field(
        default=None, description="Judge model name (the paper used Gemini 2.5 Flash-Lite)."
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Seconds per request, in total.")
    max_retries: int = Field(
        default=3, ge=0, le=10, description="Retries after timeouts, 408/429/5xx, malformed JSON."
    )
    backoff_s: float = Field(default=0.5, ge=0, description="First retry's backoff ceiling.")
    max_backoff_s: float = Field(default=8.0, ge=0, description="Cap on any backoff.")
    max_concurrency: int = Field(
        default=20, ge=1, description="Judge requests in flight at once (the paper: 20)."
    )
    max_tokens: int = Field(default=1024, ge=1, description="Reply token limit per request.")


class StructuredQARewardSettings(VerifiableConfig):
    """R_verif's ranges, the judge and its weight λ (refused if it breaks correctness dominance)."""

    judge: bool = Field(
        default=True, description="Call the LLM judge; false scores R_verif only (R_judge = 0)."
    )
    # validate_default: the checks below must also run when the field is left at its default.
    judge_client: JudgeClientSettings = Field(
        default_factory=JudgeClientSettings, validate_default=True
    )
    lambda_judge: float = Field(
        default=0.25,
        ge=0,
        validate_default=True,
        description=(
            "λ in R = R_verif + λ·R_judge. Must stay below the Correctness Dominance bound of the "
            "configured ranges (0.4 for the paper's); the paper sweeps 0, 0.1, 0.25, 0.35."
        ),
    )

    @field_validator("judge_client")
    @classmethod
    def _judge_endpoint(
        cls, value: JudgeClientSettings, info: ValidationInfo
    ) -> JudgeClientSettings:
        if info.data.get("judge") and not (value.url and value.model):
            raise ValueError(
                "judge_client.url and judge_client.model are required when judge is true "
                "(set judge: false to score R_verif only)"
            )
        return value

    @field_validator("lambda_judge")
    @classmethod
    def _correctness_dominance(cls, value: float, info: ValidationInfo) -> float:
        names = VerifiableConfig.model_fields
        if not all(name in info.data for name in names):
            return value  # a range failed its own validation; that error is the one to report
        ranges = VerifiableConfig(**{name: info.data[name] for name in names})
        if dominance_holds(value, ranges):
            return value
        bound = dominance_bound(ranges)
        shown = ", ".join(f"{name}={info.data[name]:g}" for name in names if name != "n_max")
        if bound <= 0:
            raise ValueError(
                f"lambda_judge={value:g}: no judge weight keeps the Correctness Dominance "
                f"Invariant with these ranges ({shown}); correct_reward must exceed "
                "format_reward + length_penalty_cap + qa_penalty_cap"
            )
        raise ValueError(
            f"lambda_judge={value:g} breaks the Correctness Dominance Invariant: with these "
            f"ranges ({shown}) it must be < {bound:g}, or a wrong answer with good reasoning "
            "could score at least as much as a correct one (Structured Q&A §3.3)"
        )

    def verifiable_config(self) -> VerifiableConfig:
        """The R_verif ranges alone."""
        return VerifiableConfig.model_validate(
            self.model_dump(include=set(VerifiableConfig.model_fields))
        )


@dataclass(frozen=True, slots=True)
class _Scored:
    sample: Sample
    verif: VerifiableResult


@register_reward
class StructuredQAReward(Reward):
    """R = R_verif + λ·R_judge of each response (Structured Q&A eq. 1); per-sample.

    Every sample needs ``ground_truth`` (a missing one raises ValueError naming the sample, before
    any judge call). The judge sees ``extra["problem"]`` when the dataset has that column, else the
    prompt. Judge failures give R_judge = 0 with ``judge_failed`` = 1; :meth:`judge_stats` counts
    them. With ``judge: false`` the score is R_verif alone and no client is built. ``judge`` (a
    ready :class:`ChatJudge`, e.g. with a custom prompt template) replaces the one the settings
    describe.
    """

    name = "structured_qa"
    Settings = StructuredQARewardSettings
    components = COMPONENT_KEYS

    def __init__(self, settings: StructuredQARewardSettings, *, judge: ChatJudge | None = None):
        super().__init__(settings)
        self._settings = settings
        self._config = settings.verifiable_config()
        self._judge: ChatJudge | None = None
        if settings.judge:
            self._judge = judge if judge is not None else _make_judge(settings.judge_client)

    def judge_stats(self) -> JudgeStats | None:
        """The judge client's cumulative counters (requests, retries, judged, failures)."""
        return self._judge.stats() if self._judge is not None else None

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        scored = self._verifiable(groups)
        requests = self._judge_requests(scored)
        outcomes: dict[int, JudgeOutcome] = {}
        if requests and self._judge is not None:
            judge = self._judge
            results = _run_sync(lambda: judge.ajudge_many(list(requests.values())))
            outcomes = dict(zip(requests, results, strict=True))
        return self._assemble(groups, scored, outcomes)

    async def ascore_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        scored = await asyncio.to_thread(self._verifiable, groups)
        requests = self._judge_requests(scored)
        outcomes: dict[int, JudgeOutcome] = {}
        if requests and self._judge is not None:
            results = await self._judge.ajudge_many(list(requests.values()))
            outcomes = dict(zip(requests, results, strict=True))
        return self._assemble(groups, scored, outcomes)

    def _verifiable(self, groups: Sequence[Sequence[Sample]]) -> list[_Scored]:
        for g, group in enumerate(groups):
            for i, sample in enumerate(group):
                if sample.ground_truth is None:
                    raise ValueError(
                        f"reward 'structured_qa': sample {i} of group {g} (prompt "
                        f"{sample.prompt[:80]!r}) has no ground truth, which R_correct needs; "
                        "give the dataset a 'ground_truth' column"
                    )
        return [
            _Scored(s, score_verifiable(s.response, s.ground_truth or "", self._config))
            for group in groups
            for s in group
        ]

    def _judge_requests(self, scored: list[_Scored]) -> dict[int, JudgeRequest]:
        """Flat index -> request, for the judgeable samples (none without a judge)."""
        if self._judge is None:
            return {}
        return {
            k: JudgeRequest(_problem(item.sample), item.verif.parsed.pairs)
            for k, item in enumerate(scored)
            if is_judgeable(item.verif.parsed)
        }

    def _assemble(
        self,
        groups: Sequence[Sequence[Sample]],
        scored: list[_Scored],
        outcomes: dict[int, JudgeOutcome],
    ) -> list[list[RewardOutput]]:
        flat = [self._output(item, outcomes.get(k)) for k, item in enumerate(scored)]
        out: list[list[RewardOutput]] = []
        start = 0
        for group in groups:
            out.append(flat[start : start + len(group)])
            start += len(group)
        return out

    def _output(self, item: _Scored, outcome: JudgeOutcome | None) -> RewardOutput:
        terms = item.verif.terms
        r_judge = outcome.reward if outcome is not None else 0.0
        score = total_reward(terms.total, r_judge, self._settings.lambda_judge)
        return RewardOutput(
            score=score,
            components={
                "r_correct": terms.correct,
                "r_format": terms.format,
                "r_length": terms.length,
                "r_qa": terms.qa,
                "r_judge": r_judge,
                "n_pairs": float(item.verif.parsed.n_pairs),
                "judge_failed": 1.0 if outcome is not None and outcome.failed else 0.0,
            },
        )


def _make_judge(client: JudgeClientSettings) -> ChatJudge:
    # The settings validator guarantees both when judge is on.
    if client.url is None or client.model is None:
        raise ValueError("judge_client.url and judge_client.model are required when judge is true")
    return ChatJudge(
        base_url=client.url,
        model=client.model,
        timeout_s=client.timeout_s,
        max_retries=client.max_retries,
        backoff_s=client.backoff_s,
        max_backoff_s=client.max_backoff_s,
        max_concurrency=client.max_concurrency,
        max_tokens=client.max_tokens,
    )


def _problem(sample: Sample) -> str:
    problem = sample.extra.get("problem")
    return problem if isinstance(problem, str) and problem.strip() else sample.prompt


def _run_sync(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine from sync code, also from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    # This thread already runs a loop (a sync reward call from async code): asyncio.run would
    # refuse, and waiting on that loop from inside it would deadlock. A private thread and loop
    # block the caller meanwhile, which is what a sync call means; async callers use ascore_groups.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sarl-judge") as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()
