"""Step extraction: the reasoning block of a response, split into steps (SARL v2 §3.2).

Called by the structure scorer and the CLI (to check ``step_labels`` against the step count).
"""

from __future__ import annotations

from dataclasses import dataclass

from sarl.rewards.structure.config import StructureRewardConfig


@dataclass(frozen=True, slots=True)
class Steps:
    """The scored steps of one response; ``truncated`` is True when ``max_steps`` cut the tail."""

    texts: tuple[str, ...]
    truncated: bool
    has_think: bool


Span = tuple[int, int]


def reasoning_span(response: str, config: StructureRewardConfig) -> Span | None:
    """``[start, end)`` of the text inside the first ``<think>`` block, or None when there is none.

    An unclosed block runs to the end of the response (generation was cut at the length limit,
    the reasoning so far is still reasoning). Text before ``<think>`` is ignored, because chat
    templates may prefill it.
    """
    start = response.find(config.think_open)
    if start < 0:
        # Some templates (Qwen3) put "<think>" in the prompt, so the completion only has the
        # closing tag: everything before it is the reasoning block.
        close = response.find(config.think_close)
        return (0, close) if close >= 0 else None
    body = start + len(config.think_open)
    end = response.find(config.think_close, body)
    return (body, len(response)) if end < 0 else (body, end)


def reasoning_block(response: str, config: StructureRewardConfig) -> str | None:
    """The text inside the first ``<think>`` block (see :func:`reasoning_span`), or None."""
    span = reasoning_span(response, config)
    return None if span is None else response[span[0] : span[1]]


def _spans(response: str, config: StructureRewardConfig, limit: int) -> list[Span]:
    """Up to ``limit`` step spans: the reasoning block cut at each delimiter (``str.split``'s
    cuts, left to right), each part stripped of whitespace (``str.strip``), empty parts dropped.
    Linear in the response; stops after ``limit`` steps."""
    block = reasoning_span(response, config)
    if block is None:
        block = (0, len(response)) if config.missing_think == "whole_response" else (0, 0)
    lo, hi = block
    spans: list[Span] = []
    pos = lo
    while len(spans) < limit:
        cut = response.find(config.delimiter, pos, hi)
        end = hi if cut < 0 else cut
        part = response[pos:end]
        a = pos + (len(part) - len(part.lstrip()))
        b = end - (len(part) - len(part.rstrip()))
        if a < b:
            spans.append((a, b))
        if cut < 0:
            break
        pos = cut + len(config.delimiter)
    return spans


def step_char_spans(response: str, config: StructureRewardConfig) -> list[Span]:
    """``[start, end)`` of every scored step, in order (``response[a:b]`` is the step's text):
    what :func:`extract_steps` returns, with positions. The policy embedder
    (``sarl.embedding.spans``) maps these to tokens."""
    return _spans(response, config, config.max_steps)


def extract_steps(response: str, config: StructureRewardConfig) -> Steps:
    """Split a response's reasoning into stripped, non-empty steps, capped at ``max_steps``.

    No reasoning block: the whole response is segmented (``missing_think='whole_response'``) or
    there are no steps (``'no_steps'``).
    """
    spans = _spans(response, config, config.max_steps + 1)  # one more tells whether it was cut
    return Steps(
        texts=tuple(response[a:b] for a, b in spans[: config.max_steps]),
        truncated=len(spans) > config.max_steps,
        has_think=reasoning_span(response, config) is not None,
    )
