"""The generative half of RLKD's GSRM: decompose a reasoning path into steps, judge a match.

Called by ``sarl.rewards.rlkd.reward``. RLKD §3.1.1 fine-tunes Qwen2.5-7B-Instruct to emit the
step sequence and §3.1.2 uses Qwen2.5-7B-Instruct to "determine whether two texts are matched";
here both are whatever models serve the configured chat endpoints, prompted with
``prompts/decompose.txt`` and ``prompts/match.txt`` (package data).

Decomposition: the reply is parsed by :func:`sarl.rewards.rlkd.steps.parse_steps`. A reply with
no step is re-asked up to ``parse_retries`` times with a reminder of the format; after that the
path has no steps (``[]``), which the reward treats per side (see ``reward``). A reply whose steps
have no meta-reasoning at all (sub-problems and answers found, but the meta-reasoning label not
understood) is re-asked the same way, and if no reply has one, :class:`DecompositionError` is
raised: Algorithm 1 starts every step with the meta-reasoning match and an empty field never
matches, so such a decomposition would score 0 for every sample without anything failing.

Match verdicts are parsed strictly by :func:`parse_verdict`: the whole reply, after removing a
leading ``<think>`` block, surrounding quotes/emphasis/brackets and a final ``.``/``!``, must be
``yes`` or ``no`` (any case). Anything else ("Yes, because...", "Maybe", "yes/no") is not a
verdict: the judge is re-asked up to ``parse_retries`` times (with its reply and a reminder in
the conversation), then :class:`VerdictError` is raised. Counters of both are kept.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass, fields
from importlib import resources

from sarl.rewards.rlkd.chat import ChatClient
from sarl.rewards.rlkd.steps import FieldName, Step, parse_steps

_VERDICT = re.compile(r"^[\s*_\"'`(\[]*(yes|no)[\s*_\"'`)\].!]*$", re.I)
_THINK = re.compile(r"^\s*<think>.*?</think>", re.S | re.I)

_FIELD_DESCRIPTIONS: dict[FieldName, tuple[str, str]] = {
    "meta": (
        "meta-reasoning (the choice of which sub-problem to solve next, and why)",
        "choice of sub-problem",
    ),
    "question": ("sub-problem (the question this step solves)", "question"),
    "answer": ("answer to the step's sub-problem", "answer"),
}
_VERDICT_REMINDER = "That reply was not understood. Reply with exactly one word: yes or no."
_FORMAT_REMINDER = (
    "No step was found in that reply. Output the steps only, in exactly the format asked: "
    "'Step 1' then lines '[Meta-reasoning]: ...', '[Sub-problem]: ...', '[Answer]: ...'."
)


class VerdictError(RuntimeError):
    """The judge gave no parseable yes/no verdict in any of its attempts."""


class DecompositionError(RuntimeError):
    """The decomposer's replies had steps but never a meta-reasoning field (layout unknown)."""


@functools.cache
def load_prompt(name: str) -> str:
    """The text of ``prompts/<name>.txt`` (package data)."""
    path = resources.files("sarl.rewards.rlkd").joinpath("prompts", f"{name}.txt")
    return path.read_text(encoding="utf-8")


def _fill(template: str, **values: str) -> str:
    # str.replace, not str.format: reasoning paths are full of LaTeX braces.
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def parse_verdict(reply: str) -> bool | None:
    """``True`` for yes, ``False`` for no, ``None`` for anything else (rules in the docstring)."""
    m = _VERDICT.match(_THINK.sub("", reply, count=1))
    return None if m is None else m[1].lower() == "yes"


@dataclass(frozen=True, slots=True)
class GSRMStats:
    """Counters of the parse layer (HTTP-level counters are in the chat clients)."""

    decompositions: int
    empty_decompositions: int  # replies without any step with a meta-reasoning (before retrying)
    verdicts: int
    unparseable_verdicts: int  # replies that were not yes/no (before retrying)
    verdict_failures: int  # matches that raised VerdictError


class GSRM:
    """Decomposer and judge behind chat clients (they may be the same client)."""

    def __init__(
        self,
        decomposer: ChatClient,
        judge: ChatClient,
        *,
        parse_retries: int = 1,
        decompose_max_tokens: int | None = None,
        judge_max_tokens: int | None = None,
    ) -> None:
        self.decomposer = decomposer
        self.judge = judge
        self.parse_retries = parse_retries
        self.decompose_max_tokens = decompose_max_tokens
        self.judge_max_tokens = judge_max_tokens
        self._lock = threading.Lock()
        self._counts = {f.name: 0 for f in fields(GSRMStats)}

    def _count(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    def stats(self) -> GSRMStats:
        with self._lock:
            return GSRMStats(**self._counts)

    def decompose(self, path: str, problem: str = "") -> list[Step]:
        """The steps of a reasoning path; ``[]`` if no reply had any. ChatError propagates;
        :class:`DecompositionError` when replies had steps but none with a meta-reasoning."""
        prompt = _fill(load_prompt("decompose"), problem=problem, reasoning_path=path)
        messages = [{"role": "user", "content": prompt}]
        without_meta = ""  # the last reply whose steps had no meta-reasoning
        for attempt in range(self.parse_retries + 1):
            self._count("decompositions")
            reply = self.decomposer.complete(messages, max_tokens=self.decompose_max_tokens)
            steps = parse_steps(reply)
            if any(step.meta for step in steps):
                return steps
            self._count("empty_decompositions")
            if steps:
                without_meta = reply
            if attempt < self.parse_retries:
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": _FORMAT_REMINDER},
                ]
        if without_meta:
            raise DecompositionError(
                "the decomposer's steps have no meta-reasoning field (its label is not one of "
                "Meta-reasoning, Meat-reasoning, sub-think), so every match would fail; reply "
                f"starts {without_meta[:200]!r}"
            )
        return []

    def match(self, field: FieldName, teacher: str, student: str) -> bool:
        """The judge's verdict on one field; VerdictError (or ChatError) when there is none."""
        description, name = _FIELD_DESCRIPTIONS[field]
        prompt = _fill(
            load_prompt("match"),
            field_description=description,
            field_name=name,
            teacher=teacher,
            student=student,
        )
        messages = [{"role": "user", "content": prompt}]
        replies = []
        for attempt in range(self.parse_retries + 1):
            self._count("verdicts")
            reply = self.judge.complete(messages, max_tokens=self.judge_max_tokens)
            verdict = parse_verdict(reply)
            if verdict is not None:
                return verdict
            self._count("unparseable_verdicts")
            replies.append(reply)
            if attempt < self.parse_retries:
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": _VERDICT_REMINDER},
                ]
        self._count("verdict_failures")
        shown = "; ".join(repr(r[:80]) for r in replies)
        raise VerdictError(f"judge gave no yes/no verdict on the {field} field: {shown}")
