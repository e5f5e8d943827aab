"""The Study report as text: ``report.md`` and the cells of the report's tables.

Called by :meth:`sarl.study.aggregate.StudyReport.to_markdown` (:func:`markdown`, written as
``report.md`` by :func:`sarl.study.report.write_report`) and by the tables a notebook and
``sarl study report`` show (:func:`arm_columns`, :func:`arm_cells`, :func:`paired_rows`,
:func:`validity_columns`, :func:`validity_rows` and :func:`how_read`, through
:mod:`sarl.study.result` and :mod:`sarl.cli.study`), so that the file,
the notebook and the terminal read alike. Pure: a :class:`~sarl.study.aggregate.StudyReport` in,
strings out. The functions take it as a :class:`ReportView` (what they read of it): the report
renders itself through this module, so this module does not import it.

Numbers: an interval reads ``0.180 [0.150, 0.210]``, with ``clipped to [0, 1]`` where it was
clipped to the metric's range, ``(1 seed)`` where one seed gives no interval, ``—`` where there
is no value; response lengths (token counts) have one decimal, KL four, the rest three.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sarl.study.flags import (
    CHANCE,
    CHANCE_MARGIN,
    FLAG_LENGTH_COLLAPSE,
    FLAG_SR_UP_ACCURACY_DOWN,
    FLAG_TEXT,
    FLAG_VALIDITY_AT_CHANCE,
    LENGTH_COLLAPSE_RATIO,
    at_chance,
)
from sarl.study.history import COMPARED
from sarl.study.stats import Interval

# Number formats per metric in report.md (lengths are token counts; the rest are rates or small).
_FORMATS: Mapping[str, str] = {"length": ".1f", "kl": ".4f"}
_FIGURE_NAMES: Mapping[str, str] = {
    "auroc": "pooled AUROC",
    "pair_agreement": "within-prompt AUROC",
}
_LABELS: Mapping[str, str] = {
    "eval_accuracy": "held-out avg@{k}",
    "eval_pass": "held-out pass@{k}",
    "eval_answer_rate": "held-out answer rate",
    "sr": "SR",
    "clustering": "C",
    "path_length": "L",
    "length": "response length",  # tokens
    "kl": "KL",
    "entropy": "entropy",
    "accuracy": "training accuracy",
    "answer_rate": "training answer rate",
    "degenerate": "degenerate maps",
}


class ReportView(Protocol):
    """What the text reads of a :class:`~sarl.study.aggregate.StudyReport` (see there for what
    each field holds); read-only, so the frozen report is one."""

    @property
    def study(self) -> str: ...

    @property
    def reference(self) -> str: ...

    @property
    def k(self) -> int: ...

    @property
    def arms(self) -> tuple[str, ...]: ...

    @property
    def runs(self) -> Mapping[str, Mapping[int, Mapping[str, Any]]]: ...

    @property
    def aggregate(self) -> Mapping[str, Mapping[str, Interval]]: ...

    @property
    def vs_reference(self) -> Mapping[str, Mapping[str, Interval]]: ...

    @property
    def flags(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def notes(self) -> tuple[str, ...]: ...

    @property
    def confidence(self) -> float: ...

    @property
    def benchmark(self) -> str: ...

    @property
    def validity(self) -> Mapping[str, Mapping[str, Mapping[str, Interval]]]: ...

    @property
    def validity_seeds(self) -> Mapping[str, Mapping[str, Mapping[str, Mapping[int, Any]]]]: ...

    @property
    def validity_windows(self) -> Mapping[str, Mapping[int, Any]]: ...

    @property
    def validity_counts(self) -> Mapping[str, Mapping[int, Mapping[str, float | None]]]: ...

    def validity_flagged(self, arm: str) -> tuple[str, ...]:
        """The rewards of ``arm`` that raise ``validity_at_chance_reward_up``."""
        ...

    def below_trivial(self, arm: str) -> tuple[str, ...]:
        """The rewards of ``arm`` that do not beat the strongest trivial predictor."""
        ...


def _num(value: float | None, metric: str, signed: bool = False) -> str:
    if value is None:
        return "—"
    return format(value, ("+" if signed else "") + _FORMATS.get(metric, ".3f"))


def _iv(interval: Interval, metric: str, signed: bool = False) -> str:
    """``0.180 [0.150, 0.210]``; clipped: ``0.011 [0.000, 0.147] clipped to [0, 1]``; one seed:
    ``0.180 (1 seed)``; no value: ``—``."""
    if interval.mean is None:
        return "—"
    mean = _num(interval.mean, metric, signed)
    if interval.low is None or interval.high is None:
        return f"{mean} (1 seed)"
    low, high = _num(interval.low, metric, signed), _num(interval.high, metric, signed)
    clipped = "" if interval.clipped_to is None else f" clipped to {interval.clipped_to}"
    return f"{mean} [{low}, {high}]{clipped}"


def _start_end(agg: Mapping[str, Interval], metric: str) -> str:
    start = _num(agg[f"{metric}_start"].mean, metric)
    return f"{start} → {_iv(agg[f'{metric}_end'], metric)}"


def arm_columns(report: ReportView, *, code: bool = False) -> list[str]:
    """Headers of the report's main table (``code``: the reference arm in Markdown backticks)."""
    k = report.k
    ref = f"`{report.reference}`" if code else report.reference
    return [
        "arm",
        "seeds",
        f"avg@{k} start → end",
        f"Δ avg@{k}",
        f"Δ avg@{k} vs {ref} (end)",
        "SR start → end",
        "Δ SR",
        "length start → end",
        "flags",
    ]


def arm_cells(report: ReportView, arm: str) -> list[str]:
    """One arm's row of the main table: means with their intervals, the flags raised."""
    agg, paired = report.aggregate[arm], report.vs_reference[arm]
    vs_ref = "reference" if arm == report.reference else _iv(paired["eval_accuracy_end"], "", True)
    return [
        arm,
        ", ".join(map(str, sorted(report.runs[arm]))) or "none",
        _start_end(agg, "eval_accuracy"),
        _iv(agg["eval_accuracy_change"], "eval_accuracy", signed=True),
        vs_ref,
        _start_end(agg, "sr"),
        _iv(agg["sr_change"], "sr", signed=True),
        _start_end(agg, "length"),
        "; ".join(_flag_text(report, arm, f) for f in report.flags[arm]) or "—",
    ]


def _flag_text(report: ReportView, arm: str, flag: str) -> str:
    """A flag's text; the validity flag names its rewards."""
    if flag != FLAG_VALIDITY_AT_CHANCE:
        return FLAG_TEXT[flag]
    return f"{FLAG_TEXT[flag]} ({', '.join(report.validity_flagged(arm))})"


def validity_columns() -> list[str]:
    """Headers of the reward-validity table (:func:`validity_rows`)."""
    return [
        "arm",
        "reward",
        "within-prompt AUROC start → end",
        "per seed (end)",
        "pooled AUROC start → end",
        "pair ties (end)",
        "vs trivial (end)",
        "beats trivial",
        "Δ reward",
        "at chance",
    ]


def validity_rows(report: ReportView) -> list[list[str]]:
    """One row per arm and reward whose validity the runs logged, the trivial predictors last:
    the headline within-prompt AUROC (first → last quarter of the steps) with its per-seed end
    values, the pooled AUROC, pair ties at the end, the difference to the strongest trivial
    predictor (per seed in brackets) and whether it beats it, the reward term's change, and
    which late-window figures are at chance (``flag`` when the reward also rose)."""
    rows: list[list[str]] = []
    for arm in report.arms:
        flagged, below = report.validity_flagged(arm), report.below_trivial(arm)
        by_reward = report.validity.get(arm, {})
        seeds = report.validity_seeds.get(arm, {})
        for reward in sorted(by_reward, key=lambda r: (r.startswith("trivial."), r)):
            figures, per_seed = by_reward[reward], seeds.get(reward, {})
            chance = ", ".join(_FIGURE_NAMES[f] for f in at_chance(figures)) or "—"
            if reward in flagged:
                chance += " (flag)"
            vs = figures.get("vs_trivial_end")
            vs_cell = "—" if vs is None or vs.mean is None else _iv(vs, "vs", signed=True)
            if vs_cell != "—":
                vs_cell += f" ({_seed_values(per_seed.get('vs_trivial_end', {}), signed=True)})"
            beats = "—" if vs_cell == "—" else ("NO" if reward in below else "yes")
            rows.append(
                [
                    arm,
                    reward,
                    _start_end(figures, "pair_auroc"),
                    _seed_values(per_seed.get("pair_auroc_end", {}), per_seed.get("points_end")),
                    _start_end(figures, "auroc"),
                    _iv(figures["pair_ties_end"], "pair_ties"),
                    vs_cell,
                    beats,
                    _iv(figures["reward_change"], "reward", signed=True),
                    chance,
                ]
            )
    return rows


def _seed_values(
    values: Mapping[int, float | None],
    points: Mapping[int, float | None] | None = None,
    signed: bool = False,
) -> str:
    """``s0 0.62 (16 steps), s1 0.58 (15 steps)``: each seed's end value (and at how many
    steps of the window it was logged); ``—`` without values."""
    cells = []
    for seed, value in values.items():
        n = None if points is None else points.get(seed)
        steps = "" if n is None else f" ({int(n)} steps)"
        cells.append(f"s{seed} {_num(value, '', signed)}{steps}")
    return ", ".join(cells) or "—"


def counts_text(report: ReportView) -> str:
    """``ground-truth s0 5.1 of 8.0 prompts with pairs, 41 pairs; ...``: what each run's end
    window rests on, per step (means); empty where no run logged its counts."""
    cells = [
        f"{arm} s{seed} {c['prompts_with_pairs']:.1f} of {c['prompts']:.1f} prompts with pairs, "
        f"{c['pairs']:.0f} pairs"
        for arm, by_seed in report.validity_counts.items()
        for seed, c in by_seed.items()
        if None not in (c.get("prompts"), c.get("prompts_with_pairs"), c.get("pairs"))
    ]
    return "; ".join(cells)


def windows_text(report: ReportView) -> str:
    """Which steps "start" and "end" hold: ``steps 1-16 and 49-64, 16 steps each`` when every
    run has the same windows, else per arm and seed."""
    found = {w for by_seed in report.validity_windows.values() for w in by_seed.values()}

    def one(w: Any) -> str:
        (a, b), (c, d) = w
        return f"steps {a}–{b} and {c}–{d}, {b - a + 1} steps each"

    if len(found) == 1:
        return one(next(iter(found)))
    return "; ".join(
        f"{arm} s{seed}: {one(w)}"
        for arm, by_seed in report.validity_windows.items()
        for seed, w in by_seed.items()
    )


def paired_rows(report: ReportView) -> list[list[str]]:
    """``[arm, metric, Δ end, Δ change]`` of every non-reference arm and compared metric."""
    rows: list[list[str]] = []
    for arm in report.arms:
        if arm == report.reference:
            continue
        paired = report.vs_reference[arm]
        for m in COMPARED:
            end, change = paired[f"{m}_end"], paired[f"{m}_change"]
            if end.mean is None and change.mean is None:
                continue
            label = _LABELS[m].format(k=report.k)
            rows.append([arm, label, _iv(end, m, True), _iv(change, m, True)])
    return rows


def how_read(report: ReportView) -> str:
    """What the numbers of the report are (one paragraph)."""
    k, pct = report.k, f"{report.confidence:.0%}"
    return (
        f"Held-out avg@{k} and pass@{k} on `{report.benchmark}`: first evaluation (step 0, "
        "before any RL update) → last; training metrics: mean of the first → last quarter of "
        f"the steps. Means over seeds with {pct} Student-t intervals (none from one seed), "
        "clipped to the values possible (shares and SR in [0, 1]; length, KL and entropy "
        "≥ 0; changes and differences within what two such values allow), the range named where "
        "an interval was clipped; differences vs the reference are paired by seed."
    )


def markdown(report: ReportView) -> str:
    """``report.md``: one row per arm, the paired differences, the flags, the notes."""
    k, ref = report.k, report.reference
    lines = [
        f"# Study `{report.study}`",
        "",
        f"Reference arm: `{ref}`. {how_read(report)}",
        "",
        "| " + " | ".join(arm_columns(report, code=True)) + " |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in report.arms:
        cells = arm_cells(report, arm)
        lines.append("| " + " | ".join([f"`{arm}`", *cells[1:]]) + " |")
    lines += _paired_section(report)
    lines += _validity_section(report)
    lines += [
        "",
        "## Flags",
        "",
        f"- **{FLAG_TEXT[FLAG_SR_UP_ACCURACY_DOWN]}** (`{FLAG_SR_UP_ACCURACY_DOWN}`): SR rose "
        f"on average while the held-out avg@{k}, held-out answer-rate or training answer-rate "
        "change lies entirely below 0 (one seed: the sign of its change).",
        f"- **{FLAG_TEXT[FLAG_LENGTH_COLLAPSE]}** (`{FLAG_LENGTH_COLLAPSE}`): mean response "
        f"length at the end < {LENGTH_COLLAPSE_RATIO:g} x at the start.",
        f"- **{FLAG_TEXT[FLAG_VALIDITY_AT_CHANCE]}** (`{FLAG_VALIDITY_AT_CHANCE}`): a reward "
        "term rose on average (last quarter − first) while, over the last quarter, the mean "
        f"over seeds of its AUROC vs correctness is ≤ {CHANCE + CHANCE_MARGIN:g}, or its "
        f"within-prompt pairs agree + ties/2 ≤ {CHANCE + CHANCE_MARGIN:g} (correctly ordered "
        f"pairs exceed wrongly ordered ones by ≤ {2 * CHANCE_MARGIN:g} of all pairs). Only "
        "where the runs logged reward validity (ground truth known).",
    ]
    if report.notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in report.notes)]
    return "\n".join(lines) + "\n"


def _validity_section(report: ReportView) -> list[str]:
    rows = validity_rows(report)
    if not rows:
        return []
    lines = [
        "",
        "## Reward validity",
        "",
        "Does each reward rank the policy's correct responses above its wrong ones? The "
        "headline is the within-prompt AUROC: the (correct, incorrect) pairs of one prompt the "
        "reward orders right, ties counting 1/2 (what GRPO's advantage uses; "
        f"{CHANCE:g} = chance); the pooled AUROC over each training batch is secondary (it also "
        "credits telling easy prompts from hard ones). Start → end: means over the first and "
        f"the last quarter of the training steps ({windows_text(report)}), whether or not a "
        "figure was logged at each (it is not where a batch has no pair); then means over "
        "seeds with their interval and, per seed, the end value and at how many steps of the "
        "window it was logged. `trivial.has_answer` / `trivial.format_valid` score 1 when a "
        "response has a boxed answer / a well-formed one: the floor a reward must beat. vs "
        "trivial: the within-prompt AUROC minus the strongest trivial predictor's, same run "
        "and window (per seed in brackets); beats trivial: NO where its mean over seeds is "
        "≤ 0. Δ reward: the reward term's own change (last quarter − first).",
    ]
    if counts := counts_text(report):
        lines += ["", f"Counts per training step in the end window (means): {counts}."]
    lines += [
        "",
        "| " + " | ".join(validity_columns()) + " |",
        "|" + "---|" * len(validity_columns()),
    ]
    for arm, reward, *cells in rows:
        lines.append("| " + " | ".join([f"`{arm}`", f"`{reward}`", *cells]) + " |")
    return lines


def _paired_section(report: ReportView) -> list[str]:
    rows = paired_rows(report)
    if not rows:
        return []
    lines = [
        "",
        f"## Paired differences vs `{report.reference}` (arm − reference, same seeds)",
        "",
        "| arm | metric | Δ end | Δ change |",
        "|---|---|---|---|",
    ]
    for arm, label, end, change in rows:
        lines.append(f"| `{arm}` | {label} | {end} | {change} |")
    return lines


__all__ = [
    "ReportView",
    "arm_cells",
    "arm_columns",
    "counts_text",
    "how_read",
    "markdown",
    "paired_rows",
    "validity_columns",
    "validity_rows",
    "windows_text",
]
