"""Benchmark: time per sample of each text-only reward against input length, 1 kB to 1 MB.

Run by ``make bench`` (through ``run_all.py``) or alone (``python tests/bench/bench_rewards.py``);
not collected by pytest. Issue 12's bound: every reward scores any text in time linear in its
length (or flat past a documented cap), no worse than 50 ms per 10 kB.

Each reward scores groups of :data:`GROUP` samples of one length, of two kinds of text, and the
slower kind counts: a *trace* (the well-formed format every reward looks for — tagged steps,
ask/reflect pairs, a boxed answer — repeated to the length) and *hostile* text (the reproducers
of issue 12 repeated: unclosed ``\\boxed{``, ``step 1***``, nested tags, braces, a 4,400-digit
answer, lone surrogates). The naive reference, measured in the same run on the same texts, is
one linear pass every reward makes anyway (``str.split``): ``x ref`` is how many such passes a
reward costs, and it should stay flat as the length grows. ``growth`` is the exponent of time
against length from 100 kB to 1 MB (1 = linear, 0 = flat past a cap).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

SIZES = (1_000, 10_000, 100_000, 1_000_000)
GROUP = 8
HUGE = "1" + "0" * 4400
TRACE_UNIT = (
    "<verify> we check that 12 * 3 = 36 and 36 - 4 = 32 </verify>\n\n"
    "<ask>What is 12 * 3?</ask><reflect>36, so 36 - 4 = 32.</reflect>\n\n"
    "[Meta-reasoning]: subtract\n[Sub-problem]: 36 - 4?\n[Answer]: 32\n\n"
)
HOSTILE_UNIT = (
    "\\boxed{" * 20
    + "step 1"
    + "*" * 200
    + "<ask>" * 20
    + "</reflect>" * 20
    + "{[" * 30
    + "\ud800 "
    + f"\\boxed{{{HUGE}}}"
)


def trace(size: int, k: int) -> str:
    body = (TRACE_UNIT * (size // len(TRACE_UNIT) + 1))[: max(0, size - 80)]
    return f"<think>{body}</think><answer>{32 + k % 2}</answer> \\boxed{{{32 + k % 2}}}"[:size]


def hostile(size: int, k: int) -> str:
    return (HOSTILE_UNIT * (size // len(HOSTILE_UNIT) + 1))[: size - 1] + str(k % 2)


def _rewards() -> dict[str, Any]:
    from sarl.rewards.registry import create_reward

    return {
        "ground_truth": create_reward("ground_truth"),
        "ttrl": create_reward("ttrl"),
        "empo": create_reward("empo"),
        "format_length": create_reward("format_length"),
        "tag_format": create_reward("tag_format"),
        "tag_lcs": create_reward("tag_lcs"),
        "structured_qa (judge off)": create_reward("structured_qa", {"judge": False}),
    }


def _per_sample_ms(fn: Callable[[], object], repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / GROUP * 1e3


def run(sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """ms per sample of each reward at each size (the slower text kind), and of the reference."""
    from sarl.rewards.base import Sample

    rewards = _rewards()
    table: dict[str, dict[int, float]] = {name: {} for name in [*rewards, "reference"]}
    for size in sizes:
        repeats = 3 if size <= 100_000 else 2
        kinds = [
            [Sample(make(size, k), prompt="Q", ground_truth="32") for k in range(GROUP)]
            for make in (trace, hostile)
        ]
        table["reference"][size] = max(
            _per_sample_ms(lambda g=g: [len(s.response.split()) for s in g], repeats) for g in kinds
        )
        for name, reward in rewards.items():
            table[name][size] = max(
                _per_sample_ms(lambda g=g, r=reward: r.score_groups([g]), repeats) for g in kinds
            )
    lo, hi = sizes[-2], sizes[-1]
    return {
        "group": GROUP,
        "sizes": list(sizes),
        "ms_per_sample": {
            name: {str(s): ms for s, ms in row.items()} for name, row in table.items()
        },
        "x_reference": {
            name: {str(s): row[s] / table["reference"][s] for s in sizes}
            for name, row in table.items()
        },
        "growth": {
            name: math.log(row[hi] / row[lo]) / math.log(hi / lo) for name, row in table.items()
        },
        "worst_ms_per_10kb": {
            name: max(ms / (s / 10_000) for s, ms in row.items() if s >= 10_000)
            for name, row in table.items()
        },
    }


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    sizes = result["sizes"]
    table = Table(
        title=f"reward ms per sample, groups of {result['group']}, slower text kind (x reference)"
    )
    table.add_column("reward")
    for s in sizes:
        table.add_column(f"{s // 1000} kB", justify="right")
    table.add_column("growth", justify="right")
    table.add_column("worst ms / 10 kB", justify="right")
    for name, row in result["ms_per_sample"].items():
        ratios = result["x_reference"][name]
        table.add_row(
            name,
            *[f"{row[str(s)]:.2f} ({ratios[str(s)]:.0f})" for s in sizes],
            f"{result['growth'][name]:.2f}",
            f"{result['worst_ms_per_10kb'][name]:.2f}",
        )
    Console(width=max(120, Console().width)).print(table)


if __name__ == "__main__":
    print_table(run())
