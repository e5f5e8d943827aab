"""Reward-validity diagnosis of scored traces: every figure of every reward, with intervals.

Pure: per reward, the values of its score and of each component for the same responses, their
correctness and prompt groups in; one :class:`FigureDiagnosis` per (reward, figure) out, with
:func:`sarl.evaluation.validity.validity`'s point figures and bootstrap intervals over prompts
(:mod:`sarl.evaluation.validity_bootstrap`, one set of resamples for the whole table). Called by
``sarl reward diagnose`` (:mod:`sarl.cli.reward_diagnose`), which scores the traces, prints
:func:`diagnosis_json` or a table, and draws :func:`sarl.viz.validity.validity_figure`.

Components are measured as the reward reports them: a component for which *lower* is better
(the structure reward's mean path length ``L``) has its AUROC of the component itself, so a valid
one reads below 0.5; :data:`LOWER_IS_BETTER` lists them and :func:`figure_note` says so.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sarl.evaluation.validity import Interval, Validity, validity
from sarl.evaluation.validity_bootstrap import bootstrap_intervals, draw_counts

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
FIGURES: Final = ("auroc", "pair_agreement", "pair_ties")


@dataclass(frozen=True)
class FigureDiagnosis:
    """The validity of one figure (a reward's score or one of its components)."""

    reward: str
    figure: str
    validity: Validity
    intervals: Mapping[str, Interval]  # by figure name; absent: none (see bootstrap_intervals)

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
        return out | {"samples": v.samples, "correct": v.correct, "pairs": v.pairs}


def diagnose(
    columns: Mapping[str, Mapping[str, Sequence[float]]],
    correct: Sequence[bool],
    groups: Sequence[Hashable],
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[FigureDiagnosis]:
    """``columns[reward][figure]``: one value per response (NaN: undefined, left out) ->
    one diagnosis per (reward, figure), in the order given."""
    draws = draw_counts(groups, resamples=resamples, seed=seed)
    return [
        FigureDiagnosis(
            reward,
            figure,
            validity(values, correct, groups),
            bootstrap_intervals(values, correct, draws, confidence=confidence),
        )
        for reward, figures in columns.items()
        for figure, values in figures.items()
    ]


def figure_note(reward: str, figure: str) -> str | None:
    """What to keep in mind reading a figure's numbers (a lower-is-better component)."""
    if (reward, figure) in LOWER_IS_BETTER:
        return (
            f"{reward} {figure}: lower is better, and the figures are of {figure} itself, so a "
            f"valid {figure} reads below 0.5 (AUROC of -{figure} = 1 - AUROC)"
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
    "FIGURES",
    "FIGURE_LABELS",
    "LOWER_IS_BETTER",
    "SCORE",
    "FigureDiagnosis",
    "diagnose",
    "diagnosis_json",
    "figure_note",
]
