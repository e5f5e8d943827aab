"""The table and the picture of ``sarl reward diagnose`` (:mod:`sarl.cli.reward_diagnose`).

One row per (reward, figure) of :func:`sarl.evaluation.diagnosis.diagnose`, the trivial
predictors last: the headline within-prompt AUROC (agreement + ties / 2) first, then the pooled
AUROC (secondary: it mixes between-prompt signal), pair agreement and ties, the difference to
the strongest trivial predictor with its interval and whether the reward beats it (``NO``
flags it), and the counts behind the intervals (responses, prompts with pairs, pairs). Notes say
how to read it and warn when the intervals rest on fewer than
:data:`~sarl.evaluation.validity.MIN_PROMPTS` prompts with pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sarl.cli import options as opt
from sarl.evaluation.validity import MIN_PROMPTS, few_prompts_warning

if TYPE_CHECKING:
    from sarl.evaluation.diagnosis import FigureDiagnosis

#: Column headers, in order.
COLUMNS = (
    "reward",
    "figure",
    "within-prompt AUROC",
    "pooled AUROC",
    "pair agreement",
    "pair ties",
    "vs trivial (within)",
    "beats trivial",
    "n",
    "prompts",
    "pairs",
)


def cell(row: FigureDiagnosis, figure: str) -> str:
    """``0.750 [0.667, 0.833]``; ``—`` where undefined."""
    value = getattr(row.validity, figure)
    if value is None:
        return "—"
    interval = row.intervals.get(figure)
    ci = "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"
    return f"{value:.3f}{ci}"


def versus_cells(row: FigureDiagnosis) -> tuple[str, str]:
    """The headline difference to the strongest trivial predictor, ``+0.120 [+0.050, +0.190]``,
    and whether the figure beats it (``yes``; ``NO`` flags it); ``—`` for a trivial row."""
    c = row.headline
    if c is None:
        return "—", "—"
    ci = "" if c.interval is None else f" [{c.interval[0]:+.3f}, {c.interval[1]:+.3f}]"
    return f"{c.difference:+.3f}{ci}", "NO" if row.flagged else "yes"


def print_table(rows: Sequence[FigureDiagnosis], context: Mapping[str, Any]) -> None:
    """The rewards side by side in one table on stdout, then how to read it."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from sarl.evaluation.diagnosis import figure_note

    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console = Console(width=200, soft_wrap=False)
    table = Table(title=title(context), box=box.SIMPLE_HEAD, title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("reward", "figure") else "right")
    for i, row in enumerate(rows):
        last = i + 1 == len(rows) or rows[i + 1].reward != row.reward
        v = row.validity
        table.add_row(
            row.reward if i == 0 or rows[i - 1].reward != row.reward else "",
            row.label,
            *(cell(row, f) for f in ("pair_auroc", "auroc", "pair_agreement", "pair_ties")),
            *versus_cells(row),
            str(v.samples),
            f"{v.mixed_prompts}/{v.prompts}",
            str(v.pairs),
            end_section=last,
        )
    console.print(table)
    for note in notes(rows, context) + [
        n for row in rows if (n := figure_note(row.reward, row.figure)) is not None
    ]:
        console.print(note, highlight=False, markup=False)


def notes(rows: Sequence[FigureDiagnosis], context: Mapping[str, Any]) -> list[str]:
    """How to read the table, the flagged figures and the few-prompts warning."""
    pct = f"{context['confidence']:.0%}"
    out = [
        "within-prompt AUROC (the headline): (correct, incorrect) pairs of the same prompt the "
        "figure orders right, ties 1/2 (= pair agreement + ties/2; 0.5 = chance; what GRPO's "
        "advantage sees). pooled AUROC (secondary): over all responses, so it also rewards "
        "telling easy prompts from hard ones. trivial.has_answer / trivial.format_valid: 1 when "
        "the response has a boxed answer / a well-formed one, the floor a reward must beat; vs "
        "trivial: the within-prompt AUROC minus the strongest of them (paired over the same "
        "resamples); beats trivial: NO where that interval does not lie above 0. "
        f"[low, high]: {pct} bootstrap over prompts ({context['resamples']} resamples, seed "
        f"{context['seed']}); — undefined. n: responses with a value; prompts: with both a "
        "correct and an incorrect response / with a value.",
    ]
    flagged = [f"{r.reward}: {r.label}" for r in rows if r.flagged]
    if flagged:
        out.append(f"not above the trivial predictors: {', '.join(flagged)}")
    # The input's count: a trivial row has a value for every response (a component's NaNs
    # would understate it).
    counted = [r for r in rows if r.trivial] or list(rows)
    widest = max(counted, key=lambda r: r.validity.mixed_prompts)
    if (warning := few_prompts_warning(widest.validity)) is not None:
        out.append(f"warning: {warning} (minimum {MIN_PROMPTS}; docs/validity.md)")
    return out


def title(context: Mapping[str, Any]) -> str:
    return (
        f"reward validity on {context['input']}: {plural(context['responses'], 'response')}, "
        f"{context['correct']} correct, {plural(context['groups'], 'prompt')} (by "
        f"{context['group_by']})"
    )


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def plot(rows: Sequence[FigureDiagnosis], context: Mapping[str, Any], path: Path) -> None:
    """``--plot``: :func:`sarl.viz.validity.plot_validity` to ``path`` (exit 2 if unwritable)."""
    from sarl.viz.validity import plot_validity

    pct = f"{context['confidence']:.0%}"
    text = f"{title(context)}\npoint: the input's figure; bar: {pct} bootstrap over prompts"
    try:
        plot_validity(rows, text, path)
    except OSError as e:
        raise opt.fail(f"--plot {path}: {e.strerror or e}") from e
    typer.echo(f"wrote {path}", err=True)


__all__ = ["COLUMNS", "cell", "notes", "plot", "print_table", "title", "versus_cells"]
