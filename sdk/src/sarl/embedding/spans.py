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

    Spans lie within the text, in text order; a special token gets an empty span where the next
    token starts. Every token that carries bytes of a multi-byte character (byte-level BPE: "∑"
    as three byte tokens) gets that character's span, on both paths, so all of them are pooled
    with the step the character is in.
    """
    ids = [int(i) for i in ids]
    text: str = tokenizer.decode(ids, skip_special_tokens=True)
    fast = _canonical_spans(tokenizer, ids, text)
    if fast is not None:
        return TokenSpans(text=text, spans=fast, canonical=True)
    return TokenSpans(text=text, spans=_prefix_spans(tokenizer, ids, text), canonical=False)


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
    return _empty_where_next_starts(found, len(text))


def _prefix_spans(tokenizer: Any, ids: list[int], text: str) -> tuple[Span, ...]:
    """Exact spans of any ids, from decoding every prefix ``ids[: i + 1]``.

    A prefix that ends inside a multi-byte character decodes with U+FFFD where the text has that
    character (byte-level BPE: one for the cut bytes; byte fallback: one per byte token of the
    run). The tokens from there to the one after which the prefix is again a prefix of the text
    all get the span of the characters completed in between: every byte token of a character
    gets the character, as on the fast path. A token that adds no character completes the last
    one (a U+FFFD of the text itself decodes the same cut or whole) and shares its span. Other
    decoders whose prefixes are not prefixes of the text (clean-up of spaces) fall back to "a
    token ends where its prefix's decoding ends". Byte fallback cannot tell two U+FFFDs of the
    text itself from cut bytes: their byte tokens may get the neighbouring U+FFFD.
    """
    special = set(getattr(tokenizer, "all_special_ids", ()))
    length = len(text)
    found: list[Span | None] = []  # None: a special token, or one whose characters are pending
    done = 0  # characters the tokens so far hold whole
    pending: list[int] = []  # tokens since the text last decoded whole
    for lo in range(0, len(ids), _PREFIX_CHUNK):
        chunk = ids[lo : lo + _PREFIX_CHUNK]
        prefixes = [ids[: lo + k + 1] for k in range(len(chunk))]
        decoded = tokenizer.batch_decode(prefixes, skip_special_tokens=True)
        for token, prefix in zip(chunk, decoded, strict=True):
            found.append(None)
            if token in special:
                continue
            pending.append(len(found) - 1)
            if prefix.endswith("\ufffd") and not text.startswith(prefix):
                continue  # inside a character
            complete = min(max(len(prefix), done), length)
            span = (done - 1, done) if complete == done > 0 else (done, complete)
            for position in pending:
                found[position] = span
            pending, done = [], complete
    for position in pending:  # ids that end inside a character decode to no text with it
        found[position] = (done, length)
    return _empty_where_next_starts(found, length)


def _empty_where_next_starts(found: Sequence[Span | None], length: int) -> tuple[Span, ...]:
    """``found`` with each missing span (a special token's) empty where the next token starts,
    so spans stay ordered."""
    spans: list[Span] = []
    following = length
    for span in reversed(found):
        spans.append(span if span is not None else (following, following))
        following = spans[-1][0]
    spans.reverse()
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
