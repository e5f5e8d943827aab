"""The OpenRubrics-v2 filters of the papers: reference-response length, then deduplication.

Called by :mod:`sarl.datasets.prepare` for sources with reference responses. sarl-v2, Appendix
B.1: "We require both reference responses should be longer than 512 tokens [...] Second, we
apply deduplication by removing duplicate instructions"; sarl-v1 (same appendix) states the
length rule as the range [512, 4096] and the duplicates as "identified by hash". We follow v2:
both responses must have strictly more than ``min_tokens`` tokens; the v1 upper bound is
available as ``max_tokens`` (inclusive), off by default. The filters run in the papers' order
(length first), so deduplication keeps the first instruction *that passed* the length filter.

Token counts come from a real tokenizer (:func:`hf_token_counter`, a local Hugging Face
tokenizer directory, e.g. the policy's). There is deliberately no character-count
approximation: a proxy would silently shift which prompts survive, so without a tokenizer
``sarl data prepare openrubrics`` refuses to run.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from sarl.datasets.tables import DatasetError

TokenCounter = Callable[[Sequence[str]], list[int]]
#: sarl-v2 Appendix B.1: both reference responses longer than 512 tokens.
MIN_RESPONSE_TOKENS = 512
_BATCH = 256


def long_enough(lengths: Sequence[int], min_tokens: int, max_tokens: int | None = None) -> bool:
    """Every reference response has more than ``min_tokens`` tokens (and at most
    ``max_tokens`` when given). No responses at all is False (nothing shows the prompt is hard)."""
    if not lengths:
        return False
    return all(n > min_tokens and (max_tokens is None or n <= max_tokens) for n in lengths)


def normalize_prompt(text: str) -> str:
    """Key for duplicate detection: Unicode NFKC, case-folded, whitespace runs collapsed, so
    copies that differ only in spacing or case count as one instruction."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


def prompt_hash(text: str) -> str:
    """sha256 of :func:`normalize_prompt` (v1: duplicates "identified by hash")."""
    return hashlib.sha256(normalize_prompt(text).encode("utf-8")).hexdigest()


def first_occurrences(prompts: Iterable[str]) -> list[bool]:
    """For each prompt, whether it is the first with its normalised hash (keep) or a repeat."""
    seen: set[str] = set()
    keep: list[bool] = []
    for text in prompts:
        key = prompt_hash(text)
        keep.append(key not in seen)
        seen.add(key)
    return keep


def hf_token_counter(tokenizer_dir: str | Path, *, progress: bool = True) -> TokenCounter:
    """Token counts (no special tokens added) by the Hugging Face tokenizer at ``tokenizer_dir``
    (a local directory, or a Hub id already in the local cache: nothing is downloaded)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise DatasetError("--tokenizer: counting tokens needs transformers installed") from e
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(
            f"--tokenizer: cannot load a tokenizer from {tokenizer_dir}: {first}"
        ) from e
    from sarl.progress import progress_bar

    def count(texts: Sequence[str]) -> list[int]:
        out: list[int] = []
        starts = range(0, len(texts), _BATCH)
        for start in progress_bar(starts, desc="counting tokens", unit="batch", enabled=progress):
            enc = tokenizer(list(texts[start : start + _BATCH]), add_special_tokens=False)
            out.extend(len(ids) for ids in enc["input_ids"])
        return out

    return count
