"""Where each step of a response sits: character spans in the text, token positions in the ids.

Called by the policy embedder (:mod:`sarl.embedding.policy`, SARL v1 Appendix A.1,
Implementation A), which mean-pools the policy's hidden states over each step's tokens. Pure
Python, no torch; the tokenizer is any Hugging Face tokenizer (duck-typed).

Three pieces:

* :func:`step_char_spans` (from the structure reward's own segmentation module, where
  ``extract_steps`` is built on it) — the ``[start, end)`` character span of every scored step;
  the policy embedder still checks at run time that the steps it is asked to embed are exactly
  these spans' texts.
* :func:`token_char_spans` — the decoded text of token ids (as TRL decodes completions:
  ``skip_special_tokens=True``) and the character span of every token in it (special tokens get
  empty spans). Fast path: re-encode the text with offsets (``return_offsets_mapping``) when that
  gives back the same ids; sampled ids are not always the tokenizer's canonical encoding of their
  text, and then each token's end is read from decoding the prefixes (exact, O(n^2) decode work,
  only for those completions).
* :func:`step_token_positions` — per step, the positions of the tokens whose character span
  overlaps the step's span; special tokens, which carry no characters, belong to no step. A token
  is in a step when it carries any of the step's characters, so a token that also carries
  surrounding whitespace or part of the delimiter (" 12", ".\\n\\n") belongs to the step: the
  step's tokens decode to the step's text plus, at most, whitespace and delimiter characters at
  either end. A token carrying characters of two steps belongs to both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.segmentation import Span

#: Prefixes decoded per tokenizer call on the exact (non-canonical) path: bounds memory.
_PREFIX_CHUNK = 256


#: The structure reward's settings that decide where steps are.
SegmentationSettings = StructureRewardConfig


@dataclass(frozen=True)
class TokenSpans:
    """Decoded text of some token ids and each token's ``[start, end)`` span in it."""

    text: str
    spans: tuple[Span, ...]  # one per id, in order; empty for special tokens
    canonical: bool  # True when the spans came from re-encoding the text (the fast path)


def token_char_spans(tokenizer: Any, ids: Sequence[int]) -> TokenSpans:
    """Decode ``ids`` (special tokens skipped, as TRL decodes completions) and locate each token.

    Spans are non-decreasing and within the text. A token that is only part of a multi-byte
    character (byte-level BPE) shares that character's span with its neighbours on the fast
    path, and gets it alone (the first token after which the character decodes) otherwise.
    """
    ids = [int(i) for i in ids]
    text: str = tokenizer.decode(ids, skip_special_tokens=True)
    fast = _canonical_spans(tokenizer, ids, text)
    if fast is not None:
        return TokenSpans(text=text, spans=fast, canonical=True)
    return TokenSpans(text=text, spans=_prefix_spans(tokenizer, ids, len(text)), canonical=False)


def _canonical_spans(tokenizer: Any, ids: list[int], text: str) -> tuple[Span, ...] | None:
    """Spans from the fast tokenizer's offsets, when re-encoding ``text`` gives back ``ids``
    (minus the special tokens decoding skipped); None otherwise."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    special = set(getattr(tokenizer, "all_special_ids", ()))
    kept = [i for i, t in enumerate(ids) if t not in special]  # positions of non-special ids
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != [ids[i] for i in kept]:
        return None
    found: list[Span | None] = [None] * len(ids)
    for position, (a, b) in zip(kept, enc["offset_mapping"], strict=True):
        found[position] = (int(a), int(b))
    # A special token gets an empty span where the next token starts, so spans stay ordered.
    spans: list[Span] = []
    following = len(text)
    for span in reversed(found):
        spans.append(span if span is not None else (following, following))
        following = spans[-1][0]
    spans.reverse()
    return tuple(spans)


def _prefix_spans(tokenizer: Any, ids: list[int], length: int) -> tuple[Span, ...]:
    """Exact spans of any ids: token i ends where ``decode(ids[: i + 1])`` ends.

    A prefix cut inside a multi-byte character decodes with a trailing U+FFFD, which the next
    token completes; the running maximum keeps ends non-decreasing through that.
    """
    ends: list[int] = []
    for lo in range(0, len(ids), _PREFIX_CHUNK):
        prefixes = [ids[: i + 1] for i in range(lo, min(lo + _PREFIX_CHUNK, len(ids)))]
        decoded = tokenizer.batch_decode(prefixes, skip_special_tokens=True)
        ends.extend(len(d) for d in decoded)
    spans: list[Span] = []
    start = 0
    for end in ends:
        end = min(max(end, start), length)
        spans.append((start, end))
        start = end
    return tuple(spans)


def step_token_positions(
    token_spans: Sequence[Span], step_spans: Sequence[Span]
) -> list[npt.NDArray[np.intp]]:
    """Per step, the sorted positions of the tokens whose span overlaps the step's span.

    Tokens that carry no characters (special tokens skipped by decoding) belong to no step.

    A step no token overlaps (impossible when the spans come from the same text) gets an empty
    array; callers treat that as an error.
    """
    if not token_spans:
        return [np.zeros(0, dtype=np.intp) for _ in step_spans]
    bounds = np.asarray(token_spans, dtype=np.int64)  # (tokens, 2)
    starts, ends = bounds[:, 0], bounds[:, 1]
    carries = ends > starts  # tokens with no characters (special tokens) are never pooled
    return [np.flatnonzero(carries & (starts < b) & (ends > a)) for a, b in step_spans]
