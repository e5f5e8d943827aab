"""The Study report's numbers: each arm's start → end over seeds, paired against the reference.

Called by :func:`sarl.study.report.report_for` (``sarl study report`` and the local Study runner),
which reads the runs and writes what :func:`build_report` returns; :func:`build_report` is pure
(run histories in, a frozen :class:`StudyReport` out), so tests and notebooks call it directly.
The interval arithmetic is :mod:`sarl.study.stats`, the flags :mod:`sarl.study.flags`, the text
:mod:`sarl.study.render`.

What is compared (:data:`~sarl.study.history.COMPARED`, per run from
:func:`~sarl.study.history.summarize_run`): the start and end value of each metric, and the change
``end − start`` of each run. Per arm, the mean of each over seeds with its 95% Student-t interval
(:mod:`sarl.study.stats`); per non-reference arm, the paired difference ``arm − reference`` over
the seeds both ran, of the end values and of the changes. Every interval is clipped to what it
can be (the metric's :class:`~sarl.tracking.metrics.Range` from
:func:`~sarl.tracking.metrics.metric_info`: start and end values to the range, changes to ``±``
its width, paired differences to the range of a difference of two such values); a clipped
interval says so in ``report.md`` ("clipped to [0, 1]") and in ``summary.json``
(``clipped_to``).

Reward validity (:func:`~sarl.study.validity_summary.summarize_validity`), where the runs logged
it: per arm and per reward (the trivial predictors of :mod:`sarl.evaluation.trivial` among them),
the same start / end / change over seeds of its within-prompt AUROC (the headline), AUROC, pair
agreement, pair ties, its difference to the strongest trivial predictor (``vs_trivial``) and of
the reward term itself (``StudyReport.validity``), which the ``validity_at_chance_reward_up`` flag
reads (:mod:`sarl.study.flags`); the per-seed values of the end window
(``StudyReport.validity_seeds``), the step windows of each run (``validity_windows``), and the
rewards that do not beat the trivial floor (:meth:`StudyReport.below_trivial`: mean over seeds
of ``vs_trivial_end`` at most 0, means as the chance flag reads them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sarl.study.flags import flags, validity_flagged
from sarl.study.history import (
    COMPARED,
    HELDOUT,
    RUN_KEYS,
    TRAINING_METRICS,
    RunHistory,
    eval_metric,
    summarize_run,
)
from sarl.study.render import markdown
from sarl.study.stats import DEFAULT_CONFIDENCE, Interval, mean_interval, paired_difference
from sarl.study.validity_summary import (
    VALIDITY_SUMMARY,
    Window,
    step_windows,
    summarize_validity,
    window_counts,
)
from sarl.tracking.metrics import SHARE, Range, metric_info, reward_metric

if TYPE_CHECKING:
    import pandas as pd

#: The validity figures of the end window kept per seed (the report shows the points).
PER_SEED: tuple[str, ...] = ("pair_auroc_end", "vs_trivial_end", "auroc_end", "points_end")


@dataclass(frozen=True)
class StudyReport:
    """Everything the report says. ``runs[arm][seed]``: :func:`summarize_run` dicts;
    ``aggregate[arm]`` and ``vs_reference[arm]`` (empty for the reference): intervals keyed
    ``<metric>_start|_end|_change`` (paired: ``_end|_change``); ``notes``: runs left out, seeds
    missing, assumptions made; ``validity[arm][reward]``: intervals keyed
    ``<figure>_start|_end|_change`` of :data:`~sarl.study.history.VALIDITY_SUMMARY` (empty for
    an arm whose runs logged no validity)."""

    study: str
    reference: str
    k: int
    arms: tuple[str, ...]
    runs: dict[str, dict[int, dict[str, Any]]]
    aggregate: dict[str, dict[str, Interval]]
    vs_reference: dict[str, dict[str, Interval]]
    flags: dict[str, tuple[str, ...]]
    notes: tuple[str, ...] = ()
    confidence: float = DEFAULT_CONFIDENCE
    benchmark: str = HELDOUT  # whose avg@k / pass@k the eval_* values are
    validity: dict[str, dict[str, dict[str, Interval]]] = field(default_factory=dict)
    #: arm -> reward -> one of :data:`PER_SEED` -> seed -> value (None: not logged).
    validity_seeds: dict[str, dict[str, dict[str, dict[int, float | None]]]] = field(
        default_factory=dict
    )
    #: arm -> seed -> (start window, end window) of training steps (first, last included).
    validity_windows: dict[str, dict[int, tuple[Window, Window]]] = field(default_factory=dict)
    #: arm -> seed -> the end window's mean counts per step (prompts, prompts_with_pairs, pairs).
    validity_counts: dict[str, dict[int, dict[str, float | None]]] = field(default_factory=dict)

    def validity_flagged(self, arm: str) -> tuple[str, ...]:
        """The rewards of ``arm`` that raise ``validity_at_chance_reward_up``."""
        return validity_flagged(self.validity.get(arm, {}))

    def below_trivial(self, arm: str) -> tuple[str, ...]:
        """The rewards of ``arm`` whose end-window within-prompt AUROC does not beat the
        strongest trivial predictor's (mean over seeds of the difference <= 0)."""
        return tuple(
            reward
            for reward, figures in self.validity.get(arm, {}).items()
            if (iv := figures.get("vs_trivial_end")) is not None
            and iv.mean is not None
            and iv.mean <= 0
        )

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` document (seed keys as strings)."""
        return {
            "study": self.study,
            "reference": self.reference,
            "k": self.k,
            "arms": {
                arm: {
                    "runs": {str(seed): dict(run) for seed, run in self.runs[arm].items()},
                    "aggregate": {m: iv.to_dict() for m, iv in self.aggregate[arm].items()},
                    "vs_reference": {m: iv.to_dict() for m, iv in self.vs_reference[arm].items()},
                    "flags": list(self.flags[arm]),
                    "validity": {
                        reward: {
                            "aggregate": {m: iv.to_dict() for m, iv in figures.items()},
                            "per_seed": {
                                key: {str(seed): v for seed, v in by_seed.items()}
                                for key, by_seed in self.validity_seeds.get(arm, {})
                                .get(reward, {})
                                .items()
                            },
                            "flagged": reward in self.validity_flagged(arm),
                            "below_trivial": reward in self.below_trivial(arm),
                        }
                        for reward, figures in self.validity.get(arm, {}).items()
                    },
                    "validity_windows": {
                        str(seed): {
                            "start": list(start),
                            "end": list(end),
                            "end_counts_per_step": self.validity_counts.get(arm, {}).get(seed),
                        }
                        for seed, (start, end) in self.validity_windows.get(arm, {}).items()
                    },
                }
                for arm in self.arms
            },
        }

    def to_markdown(self) -> str:
        """``report.md``: one row per arm, the paired differences, the flags, the notes."""
        return markdown(self)

    def to_dataframes(self) -> dict[str, pd.DataFrame]:
        """``runs`` (arm, seed, :data:`RUN_KEYS`), ``arms`` and ``paired`` (long: arm, metric,
        mean, low, high, n, clipped_to — the range as text, e.g. ``[0, 1]``, where the interval
        was clipped, else ``None``; ``paired`` adds the reference). Reward validity is in
        ``arms`` as metrics ``validity/<reward>/<figure>_start|_end|_change``."""
        import pandas as pd

        def row(iv: Interval) -> dict[str, Any]:
            clipped = None if iv.clipped_to is None else str(iv.clipped_to)
            return {**iv.to_dict(), "clipped_to": clipped}

        runs = [
            {"arm": arm, "seed": seed, **run}
            for arm in self.arms
            for seed, run in self.runs[arm].items()
        ]
        arms = [
            {"arm": arm, "metric": m, **row(iv)}
            for arm in self.arms
            for m, iv in self.aggregate[arm].items()
        ] + [
            {"arm": arm, "metric": f"validity/{reward}/{m}", **row(iv)}
            for arm in self.arms
            for reward, figures in self.validity.get(arm, {}).items()
            for m, iv in figures.items()
        ]
        paired = [
            {"arm": arm, "reference": self.reference, "metric": m, **row(iv)}
            for arm in self.arms
            for m, iv in self.vs_reference[arm].items()
        ]
        interval_columns = ["metric", "mean", "low", "high", "n", "clipped_to"]
        return {
            "runs": pd.DataFrame(runs, columns=["arm", "seed", *RUN_KEYS]),
            "arms": pd.DataFrame(arms, columns=["arm", *interval_columns]),
            "paired": pd.DataFrame(paired, columns=["arm", "reference", *interval_columns]),
        }


def build_report(
    study_name: str,
    reference_arm: str,
    arms: Sequence[str],
    histories: Sequence[RunHistory],
    k: int,
    *,
    notes: Sequence[str] = (),
    confidence: float = DEFAULT_CONFIDENCE,
    benchmark: str = HELDOUT,
) -> StudyReport:
    """Summarize every run, aggregate per arm, pair each arm with ``reference_arm``, flag.

    ``arms`` gives the order; arms found only in ``histories`` follow it (with a note). Raises
    ``ValueError`` when the reference is not an arm or one arm x seed appears twice.
    """
    order = list(dict.fromkeys(arms))
    extra = sorted({h.arm for h in histories} - set(order))
    all_notes = list(notes)
    if extra:
        all_notes.append(f"arms not in the Study's arm list, reported last: {', '.join(extra)}")
        order += extra
    if reference_arm not in order:
        raise ValueError(f"reference arm {reference_arm!r} is not an arm: {', '.join(order)}")
    runs: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in order}
    for history in sorted(histories, key=lambda h: h.seed):
        if history.seed in runs[history.arm]:
            raise ValueError(f"arm {history.arm!r} seed {history.seed} has two runs")
        runs[history.arm][history.seed] = summarize_run(history, k, benchmark=benchmark)
    validity = {arm: _validity(histories, arm, confidence) for arm in order}
    seeds = {arm: _validity_seeds(histories, arm) for arm in order}
    windows = {
        arm: {h.seed: w for h in histories if h.arm == arm and (w := step_windows(h)) is not None}
        for arm in order
    }
    all_notes += _coverage_notes(runs, reference_arm)
    per_seed = {arm: _per_seed(runs[arm]) for arm in order}
    bounds = value_ranges(k, benchmark)
    aggregate = {
        arm: {m: mean_interval(v.values(), confidence, bounds[m]) for m, v in per_seed[arm].items()}
        for arm in order
    }
    vs_reference = {
        arm: {}
        if arm == reference_arm
        else {
            # arm − reference: a difference of two end values (or of two changes).
            m: paired_difference(
                per_seed[arm][m], per_seed[reference_arm][m], confidence, bounds[m].difference()
            )
            for m in per_seed[arm]
            if not m.endswith("_start")
        }
        for arm in order
    }
    return StudyReport(
        study=study_name,
        reference=reference_arm,
        k=k,
        arms=tuple(order),
        runs=runs,
        aggregate=aggregate,
        vs_reference=vs_reference,
        flags={arm: flags(aggregate[arm], validity[arm]) for arm in order},
        notes=tuple(all_notes),
        confidence=confidence,
        benchmark=benchmark,
        validity=validity,
        validity_seeds=seeds,
        validity_windows=windows,
        validity_counts={
            arm: {h.seed: window_counts(h) for h in histories if h.arm == arm} for arm in order
        },
    )


def value_ranges(k: int, benchmark: str = HELDOUT) -> dict[str, Range]:
    """``<metric>_start|_end|_change`` of :data:`COMPARED` -> the range its values lie in:
    the metric's own range (:func:`~sarl.tracking.metrics.metric_info`) for start and end, the
    range of a difference of two such values for the change."""
    out: dict[str, Range] = {}
    for m in COMPARED:
        key = TRAINING_METRICS.get(m) or eval_metric(m, k, benchmark)
        bounds = metric_info(key).range
        out[f"{m}_start"], out[f"{m}_end"] = bounds, bounds
        out[f"{m}_change"] = bounds.difference()
    return out


def _validity(
    histories: Sequence[RunHistory], arm: str, confidence: float
) -> dict[str, dict[str, Interval]]:
    """reward -> ``<figure>_start|_end|_change`` -> interval over the arm's seeds, for every
    reward whose validity some seed of the arm logged (a seed that did not: ``None``, left out)."""
    per_seed = {h.seed: summarize_validity(h) for h in histories if h.arm == arm}
    rewards = sorted({reward for by_reward in per_seed.values() for reward in by_reward})
    out: dict[str, dict[str, Interval]] = {}
    for reward in rewards:
        rows = [by_reward.get(reward, {}) for by_reward in per_seed.values()]
        figures: dict[str, Interval] = {}
        for figure in VALIDITY_SUMMARY:
            bounds = _bounds(reward, figure)
            start = [row.get(f"{figure}_start") for row in rows]
            end = [row.get(f"{figure}_end") for row in rows]
            change = [
                None if a is None or b is None else b - a for a, b in zip(start, end, strict=True)
            ]
            figures[f"{figure}_start"] = mean_interval(start, confidence, bounds)
            figures[f"{figure}_end"] = mean_interval(end, confidence, bounds)
            figures[f"{figure}_change"] = mean_interval(change, confidence, bounds.difference())
        out[reward] = figures
    return out


def _bounds(reward: str, figure: str) -> Range:
    """The values a validity summary figure can take (the reward term's own range)."""
    if figure == "reward":
        return metric_info(reward_metric(reward)).range
    return SHARE.difference() if figure == "vs_trivial" else SHARE


def _validity_seeds(
    histories: Sequence[RunHistory], arm: str
) -> dict[str, dict[str, dict[int, float | None]]]:
    """reward -> each :data:`PER_SEED` key -> seed -> value, for the arm's seeds."""
    per_seed = {h.seed: summarize_validity(h) for h in sorted(histories, key=lambda h: h.seed)
                if h.arm == arm}  # fmt: skip
    rewards = sorted({reward for by_reward in per_seed.values() for reward in by_reward})
    return {
        reward: {
            key: {seed: by_reward.get(reward, {}).get(key) for seed, by_reward in per_seed.items()}
            for key in PER_SEED
        }
        for reward in rewards
    }


def _per_seed(runs: Mapping[int, Mapping[str, Any]]) -> dict[str, dict[int, float | None]]:
    """``<metric>_start|_end|_change`` -> seed -> value (change: ``None`` unless both ends)."""
    out: dict[str, dict[int, float | None]] = {}
    for m in COMPARED:
        start = {seed: run[f"{m}_start"] for seed, run in runs.items()}
        end = {seed: run[f"{m}_end"] for seed, run in runs.items()}
        out[f"{m}_start"], out[f"{m}_end"] = start, end
        out[f"{m}_change"] = {
            seed: None if start[seed] is None or end[seed] is None else end[seed] - start[seed]
            for seed in runs
        }
    return out


def _coverage_notes(runs: Mapping[str, Mapping[int, Any]], reference: str) -> list[str]:
    """Arms with no runs, and seeds an arm lacks that another arm ran."""
    seeds = sorted({seed for by_seed in runs.values() for seed in by_seed})
    notes: list[str] = []
    for arm, by_seed in runs.items():
        missing = [s for s in seeds if s not in by_seed]
        if not by_seed:
            notes.append(f"arm {arm}: no FINISHED runs")
        elif missing:
            notes.append(f"arm {arm}: no FINISHED run for seed {', '.join(map(str, missing))}")
    if not runs[reference]:
        notes.append(f"no paired differences: the reference arm {reference} has no runs")
    return notes


__all__ = ["PER_SEED", "StudyReport", "build_report", "value_ranges"]
