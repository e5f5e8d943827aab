"""The datasets ``sarl data prepare`` knows, and a reader per source from local files.

Called by :mod:`sarl.datasets.prepare`. Each :class:`Source` names the public dataset's columns
(tried in order, so the variants published on the Hub and Kaggle all read), its verl
``data_source``, default split and prompt template:

* ``aime``: AIME 1983-2024, the Kaggle CSV (``ID, Year, Problem Number, Question, Answer,
  Part``); the papers' math training set (sarl-v1/v2 §4.1, Appendix B.1).
* ``openrubrics``: OpenRubrics/OpenRubric-v2 (``instruction, response_a, response_b, winner,
  rubric, source``); the open-ended training set. Only the instruction becomes the prompt; the
  two reference responses are read for the length filter (:mod:`sarl.datasets.filters`).
* ``math500`` (``problem, solution, answer, subject, level, unique_id``), ``aime25``
  (``problem``/``question``, ``answer``), ``amc23`` (``question``/``problem``, ``answer``),
  ``minerva`` (``question``/``problem``, ``answer``): the four evaluation benchmarks (§4.1).

Extra columns that are present are copied into ``extra_info`` as strings (snake_case names), so
every row of a file has the same parquet schema whatever types the source file used.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sarl.datasets.schema import INSTRUCTION_ONLY_TEMPLATE, MATH_PROMPT_TEMPLATE, RewardStyle
from sarl.datasets.tables import DatasetError, cell_text, find_column, read_table

Split = Literal["train", "benchmark"]


@dataclass(frozen=True)
class Source:
    """How to read one public dataset (see the module docstring)."""

    name: str
    data_source: str
    split: Split
    question: tuple[str, ...]
    answer: tuple[str, ...] = ()  # empty: open-ended, no ground truth
    responses: tuple[tuple[str, ...], ...] = ()  # reference responses (length filter)
    extra: tuple[str, ...] = ()
    template: str = MATH_PROMPT_TEMPLATE
    ability: str = "math"

    @property
    def style(self) -> RewardStyle:
        return "rule" if self.answer else "model"


SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source(
            "aime", "aime_1983_2024", "train", ("Question", "question", "problem"),
            ("Answer", "answer"), extra=("ID", "Year", "Problem Number", "Part"),
        ),
        Source(
            "openrubrics", "openrubrics_v2", "train", ("instruction",),
            responses=(("response_a",), ("response_b",)), extra=("source", "rubric"),
            template=INSTRUCTION_ONLY_TEMPLATE, ability="open_ended",
        ),
        Source(
            "math500", "math500", "benchmark", ("problem", "question"), ("answer",),
            extra=("subject", "level", "unique_id"),
        ),
        Source(
            "aime25", "aime25", "benchmark", ("problem", "question"), ("answer",), extra=("id",),
        ),
        Source(
            "amc23", "amc23", "benchmark", ("question", "problem"), ("answer",), extra=("id",),
        ),
        Source(
            "minerva", "minerva", "benchmark", ("question", "problem"), ("answer",), extra=("id",),
        ),
    )
}  # fmt: skip


def get_source(name: str) -> Source:
    """The source named ``name``; DatasetError listing the known ones."""
    try:
        return SOURCES[name]
    except KeyError:
        raise DatasetError(f"SOURCE: unknown dataset {name!r}; known: {sorted(SOURCES)}") from None


@dataclass(frozen=True)
class Record:
    """One usable input row: question, answer (``""`` when open-ended), reference responses and
    the extra fields for ``extra_info``."""

    question: str
    answer: str
    responses: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadResult:
    records: list[Record]
    read: int
    dropped: Counter[str]


def snake(name: str) -> str:
    """``Problem Number`` -> ``problem_number``."""
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")


def read_source(source: Source, path: Path) -> ReadResult:
    """The usable rows of ``path``; rows with an empty question, answer or reference response
    are dropped and counted by reason (never silently)."""
    rows = read_table(path)
    question = find_column(path, rows, source.question, "question")
    answer = find_column(path, rows, source.answer, "answer") if source.answer else None
    responses = [
        find_column(path, rows, names, f"reference response {i + 1}")
        for i, names in enumerate(source.responses)
    ]
    extras = [c for c in source.extra if c in rows[0]]
    records: list[Record] = []
    dropped: Counter[str] = Counter()
    for row in rows:
        q = cell_text(row.get(question))
        a = cell_text(row.get(answer)) if answer else ""
        texts = tuple(cell_text(row.get(c)) for c in responses)
        if not q:
            dropped["empty question"] += 1
        elif answer and not a:
            dropped["empty answer"] += 1
        elif not all(texts):
            dropped["empty reference response"] += 1
        else:
            extra = {snake(c): cell_text(row.get(c)) for c in extras}
            records.append(Record(q, a, texts, extra))
    return ReadResult(records, len(rows), dropped)
