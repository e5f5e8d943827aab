"""Progress bar and end-of-run summary of ``sarl reward score``, both on stderr.

The summary counts lines scored and invalid, and gives n / mean / min / max of the score and of
each reward component over the scored lines (a null value — NaN, e.g. ``rlkd``'s failure marker
or ``path_length`` of a one-node map — is left out of its metric's n). Stdout stays the JSONL
results, so the summary never mixes with them.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

from sarl import progress


def show_progress() -> bool:
    """A bar only for a person watching: stderr is a TTY and ``SARL_NO_PROGRESS`` is unset (the
    convention of ``sarl.storage``); in logs a bar would be one line per refresh."""
    return sys.stderr.isatty() and not os.environ.get("SARL_NO_PROGRESS")


def progress_bar(desc: str, path: str) -> tqdm[Any]:
    """A lines-scored bar on stderr, disabled when :func:`show_progress` is False; its total is
    the line count of ``path`` (counted only when the bar is shown; none for stdin ``-``)."""
    shown = show_progress()
    return progress.progress_bar(
        total=count_lines(path) if shown else None,
        desc=desc,
        unit=" lines",
        file=sys.stderr,
        enabled=shown,
        mininterval=0.5,
        leave=False,
    )


def count_lines(path: str) -> int | None:
    """Lines in a file (the bar's total), counted by newline bytes; None for standard input."""
    if path == "-":
        return None
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


@dataclass
class MetricStats:
    """Running n / sum / min / max of one metric's finite values, and its null count."""

    n: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    nulls: int = 0

    def add(self, value: float | None) -> None:
        if value is None:
            self.nulls += 1
            return
        self.n += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else math.nan


@dataclass
class Summary:
    """What the run scored: counts and one :class:`MetricStats` per output key, in key order."""

    lines: int = 0
    invalid: int = 0
    metrics: dict[str, MetricStats] = field(default_factory=dict)

    @property
    def scored(self) -> int:
        return self.lines - self.invalid

    def add(self, row: dict[str, Any]) -> None:
        """Count one output object (an error object or ``{"score", <component>...}``)."""
        self.lines += 1
        if "error" in row:
            self.invalid += 1
            return
        for key, value in row.items():
            if isinstance(value, list):  # structure's labels: a diagnostic, not a metric
                continue
            self.metrics.setdefault(key, MetricStats()).add(value)

    def table(self, title: str) -> Table:
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        for column in ("metric", "n", "mean", "min", "max"):
            table.add_column(column, justify="left" if column == "metric" else "right")
        for key, stats in self.metrics.items():
            values = (stats.mean, stats.low, stats.high) if stats.n else (math.nan,) * 3
            table.add_row(key, str(stats.n), *(_number(v) for v in values))
        return table


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.4f}"


def print_summary(summary: Summary, reward: str) -> None:
    """The summary on stderr: a counts line, then the metrics table (none if nothing scored)."""
    console = Console(stderr=True, width=max(100, Console(stderr=True).width), soft_wrap=False)
    console.print(
        f"reward {reward}: {summary.lines} lines, {summary.scored} scored, "
        f"{summary.invalid} invalid",
        highlight=False,
    )
    if summary.metrics:
        console.print(summary.table(f"{reward} over the {summary.scored} scored lines"))
