"""Reward-validity diagnosis of scored traces: every figure of every reward, with intervals.

Pure: per reward, the values of its score and of each component for the same responses, their
correctness and prompt groups in; one :class:`FigureDiagnosis` per (reward, figure) out, with
:func:`sarl.evaluation.validity.validity`'s point figures and bootstrap intervals over prompts
(:mod:`sarl.evaluation.validity_bootstrap`, one set of resamples for the whole table). Called by
``sarl reward diagnose`` (:mod:`sarl.cli.reward_diagnose`), which scores the traces, prints
:func:`diagnosis_json` or a table, and draws :func:`sarl.viz.validity.validity_figure`.

Beside the rewards, the trivial predictors of :mod:`sarl.evaluation.trivial` ("has an answer",
"answer format is valid") get rows of their own, and every reward figure a
:class:`Comparison` per figure with the strongest of them: the difference reward − predictor and
its interval over the *same* resamples (paired: one set of draws for the whole table). A figure
*beats* the trivial floor when that interval lies above 0 (no interval: when the difference is
above 0); :attr:`FigureDiagnosis.flagged` is a figure that does not, on the headline
within-prompt AUROC (agreement + ties / 2; the pooled AUROC where no prompt has pairs).

Components are measured as the reward reports them: a component for which *lower* is better
(the structure reward's mean path length ``L``) has its AUROC of the component itself, so a valid
one reads below 0.5; :data:`LOWER_IS_BETTER` lists them and :func:`figure_note` says so.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from sarl.evaluation.trivial import is_trivial, oriented, strongest
from sarl.evaluation.validity import Interval, Validity, few_prompts_warning, validity
from sarl.evaluation.validity_bootstrap import (
    FloatArray,
    draw_counts,
    percentile_interval,
    resample_figures,
)

#: The figure of a reward's score (its components keep their own names).
SCORE: Final = "score"
#: (reward, component) read the other way round: lower values are better.
LOWER_IS_BETTER: Final = frozenset({("structure", "path_length")})
#: Short names of figures, where the paper has one.
FIGURE_LABELS: Mapping[tuple[str, str], str] = {
    ("structure", SCORE): "SR",
    ("structure", "clustering"): "C",
    ("structure", "path_length"): "L",
}
FIGURES: Final = ("auroc", "pair_agreement", "pair_ties", "pair_auroc")
#: The figures compared with the trivial predictors, headline first.
COMPARED: Final = ("pair_auroc", "auroc")


@dataclass(frozen=True)
class Comparison:
    """One figure of a reward against the strongest trivial predictor of that figure."""

    baseline: str  # the trivial predictor's name
    baseline_value: float
    difference: float  # reward − predictor (the reward read higher-is-better)
    interval: Interval | None  # over the table's resamples, paired

    @property
    def beats(self) -> bool:
        """The reward is above the predictor beyond the interval (no interval: the point)."""
        return self.difference > 0 if self.interval is None else self.interval[0] > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "baseline_value": self.baseline_value,
            "difference": self.difference,
            "difference_interval": None if self.interval is None else list(self.interval),
            "beats": self.beats,
        }


@dataclass(frozen=True)
class FigureDiagnosis:
    """The validity of one figure (a reward's score or one of its components)."""

    reward: str
    figure: str
    validity: Validity
    intervals: Mapping[str, Interval]  # by figure name; absent: none (see bootstrap_intervals)
    versus: Mapping[str, Comparison] = field(default_factory=dict)  # by COMPARED figure

    @property
    def trivial(self) -> bool:
        """A trivial predictor's row (compared with nothing)."""
        return is_trivial(self.reward)

    @property
    def headline(self) -> Comparison | None:
        """The comparison the flag reads: within-prompt AUROC, else the pooled AUROC."""
        return self.versus.get("pair_auroc") or self.versus.get("auroc")

    @property
    def flagged(self) -> bool:
        """The figure does not beat the strongest trivial predictor (see the module)."""
        return self.headline is not None and not self.headline.beats

    @property
    def label(self) -> str:
        """``score (SR)``, ``path_length (L)``; the figure's own name elsewhere."""
        short = FIGURE_LABELS.get((self.reward, self.figure))
        return f"{self.figure} ({short})" if short else self.figure

    def to_json(self) -> dict[str, Any]:
        """Each figure with its interval (``null`` where undefined) and the counts."""
        out: dict[str, Any] = {}
        for name in FIGURES:
            out[name] = getattr(self.validity, name)
            interval = self.intervals.get(name)
            out[f"{name}_interval"] = None if interval is None else list(interval)
        v = self.validity
        return out | {
            "samples": v.samples,
            "correct": v.correct,
            "pairs": v.pairs,
            "prompts": v.prompts,
            "mixed_prompts": v.mixed_prompts,
            "warning": few_prompts_warning(v),
            "versus_trivial": {f: c.to_json() for f, c in self.versus.items()},
            "flagged": self.flagged,
        }


def diagnose(
    columns: Mapping[str, Mapping[str, Sequence[float]]],
    correct: Sequence[bool],
    groups: Sequence[Hashable],
    *,
    baselines: Mapping[str, Sequence[float]] | None = None,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[FigureDiagnosis]:
    """``columns[reward][figure]``: one value per response (NaN: undefined, left out) ->
    one diagnosis per (reward, figure), in the order given, then one per trivial predictor of
    ``baselines`` (name -> value per response, :func:`sarl.evaluation.trivial.trivial_scores`),
    each reward figure compared with them (see the module docstring)."""
    draws = draw_counts(groups, resamples=resamples, seed=seed)
    named = [(r, f, values) for r, figures in columns.items() for f, values in figures.items()]
    named += [(name, SCORE, values) for name, values in (baselines or {}).items()]
    per_resample = [resample_figures(values, correct, draws) for _, _, values in named]
    rows = [
        FigureDiagnosis(
            reward,
            figure,
            validity(values, correct, groups),
            _intervals(figures, confidence),
        )
        for (reward, figure, values), figures in zip(named, per_resample, strict=True)
    ]
    floor = {
        row.reward: (row.validity, figs)
        for row, figs in zip(rows, per_resample, strict=True)
        if row.trivial
    }
    if not floor:
        return rows
    return [
        row if row.trivial else _compared(row, _versus(row, figs, floor, confidence))
        for row, figs in zip(rows, per_resample, strict=True)
    ]


def _compared(row: FigureDiagnosis, versus: Mapping[str, Comparison]) -> FigureDiagnosis:
    return FigureDiagnosis(row.reward, row.figure, row.validity, row.intervals, versus)


def _intervals(figures: Mapping[str, FloatArray], confidence: float) -> dict[str, Interval]:
    out: dict[str, Interval] = {}
    for name in FIGURES:
        if (interval := percentile_interval(figures[name], confidence)) is not None:
            out[name] = interval
    return out


def _versus(
    row: FigureDiagnosis,
    figures: Mapping[str, FloatArray],
    floor: Mapping[str, tuple[Validity, Mapping[str, FloatArray]]],
    confidence: float,
) -> dict[str, Comparison]:
    """Each :data:`COMPARED` figure of ``row`` against the strongest trivial predictor."""
    lower = (row.reward, row.figure) in LOWER_IS_BETTER
    out: dict[str, Comparison] = {}
    for figure in COMPARED:
        value = oriented(getattr(row.validity, figure), lower)
        best = strongest({name: v for name, (v, _) in floor.items()}, figure)
        if value is None or best is None:
            continue
        name, base = best
        mine = 1.0 - figures[figure] if lower else figures[figure]  # (resamples,)
        difference = mine - floor[name][1][figure]  # NaN where either is undefined
        interval = percentile_interval(np.asarray(difference), confidence)
        out[figure] = Comparison(name, base, value - base, interval)
    return out


def figure_note(reward: str, figure: str) -> str | None:
    """What to keep in mind reading a figure's numbers (a lower-is-better component)."""
    if (reward, figure) in LOWER_IS_BETTER:
        return (
            f"{reward} {figure}: lower is better, and the figures are of {figure} itself, so a "
            f"valid {figure} reads below 0.5 (AUROC of -{figure} = 1 - AUROC); it is compared "
            "with the trivial predictors as 1 - value"
        )
    return None


def diagnosis_json(rows: Sequence[FigureDiagnosis], context: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--json`` document: ``context`` (input, counts, options) and ``rewards`` ->
    ``figures`` -> :meth:`FigureDiagnosis.to_json`, plus each reward's ``notes``."""
    rewards: dict[str, Any] = {}
    for row in rows:
        entry = rewards.setdefault(row.reward, {"figures": {}, "notes": []})
        entry["figures"][row.figure] = row.to_json()
        if (note := figure_note(row.reward, row.figure)) is not None:
            entry["notes"].append(note)
    return {**context, "rewards": rewards}


__all__ = [
    "COMPARED",
    "FIGURES",
    "FIGURE_LABELS",
    "LOWER_IS_BETTER",
    "SCORE",
    "Comparison",
    "FigureDiagnosis",
    "diagnose",
    "diagnosis_json",
    "figure_note",
]
