"""``sarl data prepare``: one public dataset file -> verl rows -> parquet at a local dir or S3.

Called by :mod:`sarl.cli.data` (and usable from Python: :func:`prepare`). Steps: read the
source's rows (:mod:`sarl.datasets.sources`), drop unusable ones, apply the OpenRubrics length
filter and deduplication (:mod:`sarl.datasets.filters`), cap at ``max_rows``, build verl rows
(:mod:`sarl.datasets.schema`) and write ``<out>/train/<source>.parquet`` or
``<out>/benchmarks/<source>.parquet`` atomically (:mod:`sarl.datasets.uris`). The returned
:class:`PrepareReport` counts rows read, dropped by reason and written; a source that ends with
no rows is an error, not an empty file.

Prompt template: the papers' for the math setting (:data:`~sarl.datasets.schema.
MATH_PROMPT_TEMPLATE`, used for AIME training and, so that evaluation asks for the answer the
way training did, for the four benchmarks), the bare instruction for OpenRubrics-v2; a
``template`` argument overrides both.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sarl.datasets.filters import (
    MIN_RESPONSE_TOKENS,
    TokenCounter,
    first_occurrences,
    long_enough,
)
from sarl.datasets.schema import check_template, verl_row
from sarl.datasets.sources import Record, Source, Split, read_source
from sarl.datasets.tables import DatasetError
from sarl.datasets.uris import join, write_parquet

SPLIT_DIRS: dict[Split, str] = {"train": "train", "benchmark": "benchmarks"}


@dataclass(frozen=True)
class PrepareReport:
    """What one ``prepare`` did: rows read, dropped (by reason), written, and where."""

    source: str
    split: Split
    read: int
    dropped: dict[str, int]
    written: int
    uri: str

    def summary(self) -> str:
        drops = ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items())) or "none"
        return (
            f"{self.source}: read {self.read}, dropped {sum(self.dropped.values())} ({drops}), "
            f"wrote {self.written} -> {self.uri}"
        )


def output_uri(out: str, source: str, split: Split) -> str:
    """``<out>/train/<source>.parquet`` or ``<out>/benchmarks/<source>.parquet``."""
    return join(out, SPLIT_DIRS[split], f"{source}.parquet")


def filter_records(
    source: Source,
    records: list[Record],
    count_tokens: TokenCounter | None,
    *,
    min_tokens: int = MIN_RESPONSE_TOKENS,
    max_tokens: int | None = None,
) -> tuple[list[Record], Counter[str]]:
    """Length filter (sources with reference responses; needs ``count_tokens``), then dedup."""
    dropped: Counter[str] = Counter()
    if source.responses:
        if count_tokens is None:
            raise DatasetError(
                f"{source.name}: the reference-response length filter needs a tokenizer; pass "
                "--tokenizer DIR (a local Hugging Face tokenizer, e.g. the policy model's)"
            )
        width = len(source.responses)
        flat = count_tokens([text for r in records for text in r.responses])
        kept = []
        for i, record in enumerate(records):
            if long_enough(flat[i * width : (i + 1) * width], min_tokens, max_tokens):
                kept.append(record)
        limit = f"<= {min_tokens}" + (f" or > {max_tokens}" if max_tokens else "")
        dropped[f"reference response {limit} tokens"] = len(records) - len(kept)
        records = kept
        keep = first_occurrences(r.question for r in records)
        dropped["duplicate prompt"] = keep.count(False)
        records = [r for r, k in zip(records, keep, strict=True) if k]
    return records, dropped


def build_rows(
    source: Source, records: list[Record], split: Split, template: str
) -> list[dict[str, Any]]:
    """verl rows of ``records``; ``extra_info.index`` is the row's position in the file."""
    return [
        verl_row(
            data_source=source.data_source,
            question=r.question,
            template=template,
            ground_truth=r.answer,
            split="train" if split == "train" else "test",
            index=i,
            ability=source.ability,
            style=source.style,
            extra=r.extra,
        )
        for i, r in enumerate(records)
    ]


def prepare(
    source: Source,
    input_path: Path,
    out: str,
    *,
    split: Split | None = None,
    count_tokens: TokenCounter | None = None,
    max_rows: int | None = None,
    template: str | None = None,
    min_tokens: int = MIN_RESPONSE_TOKENS,
    max_tokens: int | None = None,
    endpoint_url: str | None = None,
) -> PrepareReport:
    """Read, filter and write one dataset (see the module docstring)."""
    split = split or source.split
    template = check_template(template) if template is not None else source.template
    if max_rows is not None and max_rows < 1:
        raise DatasetError(f"--max-rows: must be >= 1, got {max_rows}")
    read = read_source(source, Path(input_path))
    records, dropped = filter_records(
        source, read.records, count_tokens, min_tokens=min_tokens, max_tokens=max_tokens
    )
    dropped.update(read.dropped)
    if max_rows is not None and len(records) > max_rows:
        dropped["over --max-rows"] = len(records) - max_rows
        records = records[:max_rows]
    if not records:
        raise DatasetError(
            f"{input_path}: no rows left after filtering ({dict(dropped)}); nothing written"
        )
    uri = output_uri(out, source.name, split)
    write_parquet(build_rows(source, records, split, template), uri, endpoint_url=endpoint_url)
    return PrepareReport(
        source.name, split, read.read, {k: v for k, v in dropped.items() if v}, len(records), uri
    )
