"""The Study report: each arm's start → end over seeds, paired against the reference, flagged.

Called by ``sarl study report`` (:mod:`sarl.cli.study`) and by the local Study runner at the end
of a Study, both through :func:`report_for`: find the parent run, read the arm x seed runs
(:mod:`sarl.study.history`), :func:`build_report` (pure), :func:`write_report` (``summary.json``,
``report.md``, ``curves.png``), :func:`log_report` (those files under ``report/`` of the parent run
plus headline metrics ``study/<arm>/<metric>`` on it).

What is compared (:data:`COMPARED`, per run from :func:`~sarl.study.history.summarize_run`): the
start and end value of each metric, and the change ``end − start`` of each run. Per arm, the mean
of each over seeds with its 95% Student-t interval (:mod:`sarl.study.stats`); per non-reference
arm, the paired difference ``arm − reference`` over the seeds both ran, of the end values and of
the changes. Every interval is clipped to what it can be (the metric's
:class:`~sarl.tracking.metrics.Range` from :func:`~sarl.tracking.metrics.metric_info`: start and
end values to the range, changes to ``±`` its width, paired differences to the range of a
difference of two such values); a clipped interval says so
in ``report.md`` ("clipped to [0, 1]") and in ``summary.json`` (``clipped_to``).

Reward-hacking flags (thresholds are the constants below):

* ``sr_up_accuracy_down``: the arm's SR rose on average over seeds while its held-out avg@k
  change, its held-out answer-rate change or its training answer-rate change lies entirely below
  0 (beyond the interval) — the structure reward went up while the policy got worse at, or
  stopped, answering. The harm must be beyond noise; the rise need not be (it is what the arm
  optimises, and with two seeds a t-interval is ~12 standard errors wide). With one seed there is
  no interval and the sign of the single change decides.
* ``length_collapse``: the mean response length over the last quarter of training is below
  :data:`LENGTH_COLLAPSE_RATIO` of the first quarter's (means over seeds).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sarl.study.history import (
    EVAL_METRICS,
    HELDOUT,
    RUN_KEYS,
    TRAINING_METRICS,
    RunHistory,
    StudyParent,
    eval_metric,
    find_parent_run,
    infer_benchmark,
    infer_k,
    load_study_runs,
    logged_ks,
    summarize_run,
)
from sarl.study.stats import DEFAULT_CONFIDENCE, Interval, mean_interval, paired_difference
from sarl.tracking.metrics import Range, metric_info, metric_key
from sarl.tracking.store import TrackingError, guarded, make_client

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient

    from sarl.spec.study import Study
    from sarl.tracking.tracker import Tracker

#: Metrics aggregated per arm, as ``<name>_start``, ``<name>_end`` and ``<name>_change``.
COMPARED: tuple[str, ...] = (*EVAL_METRICS, *TRAINING_METRICS)
FLAG_SR_UP_ACCURACY_DOWN: Final = "sr_up_accuracy_down"
FLAG_LENGTH_COLLAPSE: Final = "length_collapse"
#: ``length_collapse`` when mean length_end < this x mean length_start.
LENGTH_COLLAPSE_RATIO: Final = 0.5
FLAG_TEXT: Mapping[str, str] = {
    FLAG_SR_UP_ACCURACY_DOWN: "SR up while accuracy down",
    FLAG_LENGTH_COLLAPSE: f"length collapsed (< {LENGTH_COLLAPSE_RATIO:.0%} of start)",
}
SUMMARY_FILE: Final = "summary.json"
MARKDOWN_FILE: Final = "report.md"
CURVES_FILE: Final = "curves.png"
ARTIFACT_DIR: Final = "report"  # in the parent run
#: Aggregates logged on the parent run as ``study/<arm>/<name>`` (their means), and paired
#: differences as ``study/<arm>/vs_reference/<name>``.
HEADLINE: tuple[str, ...] = (
    "eval_accuracy_end",
    "eval_accuracy_change",
    "eval_pass_end",
    "sr_end",
    "sr_change",
    "length_end",
    "answer_rate_end",
)
HEADLINE_PAIRED: tuple[str, ...] = ("eval_accuracy_end", "eval_accuracy_change", "sr_change")
_DEFAULT_K = 4  # EvaluationSpec's default; only names metrics when no run evaluated


class NoFinishedRuns(TrackingError, ValueError):
    """The Study has no FINISHED arm x seed run yet, so there is nothing to report.

    A :class:`TrackingError` (what reading the Study raises) and a ``ValueError`` (nothing is
    wrong with the store, the input is empty), so callers may catch either.
    """


@dataclass(frozen=True)
class StudyReport:
    """Everything the report says. ``runs[arm][seed]``: :func:`summarize_run` dicts;
    ``aggregate[arm]`` and ``vs_reference[arm]`` (empty for the reference): intervals keyed
    ``<metric>_start|_end|_change`` (paired: ``_end|_change``); ``notes``: runs left out, seeds
    missing, assumptions made."""

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
                }
                for arm in self.arms
            },
        }

    def to_markdown(self) -> str:
        """``report.md``: one row per arm, the paired differences, the flags, the notes."""
        return _markdown(self)

    def to_dataframes(self) -> dict[str, pd.DataFrame]:
        """``runs`` (arm, seed, :data:`RUN_KEYS`), ``arms`` and ``paired`` (long: arm, metric,
        mean, low, high, n, clipped_to — the range as text, e.g. ``[0, 1]``, where the interval
        was clipped, else ``None``; ``paired`` adds the reference)."""
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


# -- Markdown --------------------------------------------------------------------------------------

# Number formats per metric in report.md (lengths are token counts; the rest are rates or small).
_FORMATS: Mapping[str, str] = {"length": ".1f", "kl": ".4f"}
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


def arm_columns(report: StudyReport, *, code: bool = False) -> list[str]:
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


def arm_cells(report: StudyReport, arm: str) -> list[str]:
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
        "; ".join(FLAG_TEXT[f] for f in report.flags[arm]) or "—",
    ]


def paired_rows(report: StudyReport) -> list[list[str]]:
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


def _markdown(report: StudyReport) -> str:
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
    lines += [
        "",
        "## Flags",
        "",
        f"- **{FLAG_TEXT[FLAG_SR_UP_ACCURACY_DOWN]}** (`{FLAG_SR_UP_ACCURACY_DOWN}`): SR rose "
        f"on average while the held-out avg@{k}, held-out answer-rate or training answer-rate "
        "change lies entirely below 0 (one seed: the sign of its change).",
        f"- **{FLAG_TEXT[FLAG_LENGTH_COLLAPSE]}** (`{FLAG_LENGTH_COLLAPSE}`): mean response "
        f"length at the end < {LENGTH_COLLAPSE_RATIO:g} x at the start.",
    ]
    if report.notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in report.notes)]
    return "\n".join(lines) + "\n"


def how_read(report: StudyReport) -> str:
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


def _paired_section(report: StudyReport) -> list[str]:
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


# -- building --------------------------------------------------------------------------------------


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
        flags={arm: flags(aggregate[arm]) for arm in order},
        notes=tuple(all_notes),
        confidence=confidence,
        benchmark=benchmark,
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


def _above_zero(interval: Interval) -> bool:
    if interval.mean is None:
        return False
    return interval.mean > 0 if interval.low is None else interval.low > 0


def _below_zero(interval: Interval) -> bool:
    if interval.mean is None:
        return False
    return interval.mean < 0 if interval.high is None else interval.high < 0


def flags(aggregate: Mapping[str, Interval]) -> tuple[str, ...]:
    """The reward-hacking flags of one arm's aggregates (see the module docstring)."""
    out: list[str] = []
    harms = ("eval_accuracy_change", "eval_answer_rate_change", "answer_rate_change")
    worse = any(_below_zero(aggregate[key]) for key in harms if key in aggregate)
    sr_rise = aggregate["sr_change"].mean
    if sr_rise is not None and sr_rise > 0 and worse:
        out.append(FLAG_SR_UP_ACCURACY_DOWN)
    start, end = aggregate["length_start"].mean, aggregate["length_end"].mean
    if start is not None and end is not None and end < LENGTH_COLLAPSE_RATIO * start:
        out.append(FLAG_LENGTH_COLLAPSE)
    return tuple(out)


# -- files and MLflow ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    """Where a report is written: ``summary.json``, ``report.md``, ``curves.png`` in one folder."""

    summary: Path
    markdown: Path
    curves: Path

    @classmethod
    def under(cls, out_dir: Path) -> ReportFiles:
        out_dir = Path(out_dir)
        return cls(out_dir / SUMMARY_FILE, out_dir / MARKDOWN_FILE, out_dir / CURVES_FILE)

    @property
    def paths(self) -> tuple[Path, Path, Path]:
        return self.summary, self.markdown, self.curves


def write_report(
    report: StudyReport, histories: Sequence[RunHistory], out_dir: Path
) -> ReportFiles:
    """Write the three files under ``out_dir``, each atomically (a temporary file, renamed), the
    curves first so a run set that cannot be drawn leaves no partial report."""
    from sarl.study.plot import plot_curves

    files = ReportFiles.under(out_dir)
    files.summary.parent.mkdir(parents=True, exist_ok=True)
    curves_tmp = _tmp(files.curves)
    try:
        plot_curves(histories, report.arms, curves_tmp, k=report.k, benchmark=report.benchmark)
        os.replace(curves_tmp, files.curves)
    finally:
        curves_tmp.unlink(missing_ok=True)
    summary = json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n"
    _write_atomic(files.summary, summary)
    _write_atomic(files.markdown, report.to_markdown())
    return files


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _write_atomic(path: Path, text: str) -> None:
    tmp = _tmp(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def headline_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """Parent-run metrics from a ``summary.json`` document (see :data:`HEADLINE`), plus
    ``study/<arm>/flags``, the number of flags raised."""
    out: dict[str, float] = {}
    for arm, data in summary["arms"].items():
        prefix = f"study/{metric_key(arm)}"
        for name in HEADLINE:
            if (mean := data["aggregate"].get(name, {}).get("mean")) is not None:
                out[f"{prefix}/{name}"] = float(mean)
        for name in HEADLINE_PAIRED:
            if (mean := data["vs_reference"].get(name, {}).get("mean")) is not None:
                out[f"{prefix}/vs_reference/{name}"] = float(mean)
        out[f"{prefix}/flags"] = float(len(data["flags"]))
    return out


def log_report(
    tracker_or_client: Tracker | MlflowClient, parent_run_id: str, files: ReportFiles
) -> None:
    """Upload the files under ``report/`` of the parent run and log :func:`headline_metrics`
    (read back from ``files.summary``, so they match the artifact) on it at step 0.

    A :class:`~sarl.tracking.tracker.Tracker` must be the parent run's own; a bare
    ``MlflowClient`` logs to ``parent_run_id``. Failures raise :class:`TrackingError`.
    """
    from sarl.tracking.tracker import Tracker

    metrics = headline_metrics(json.loads(files.summary.read_text(encoding="utf-8")))
    if isinstance(tracker_or_client, Tracker):
        if tracker_or_client.run_id != parent_run_id:
            raise ValueError(
                f"the tracker logs to run {tracker_or_client.run_id}, not to the Study's parent "
                f"run {parent_run_id}"
            )
        for path in files.paths:
            tracker_or_client.log_artifact(path, ARTIFACT_DIR)
        tracker_or_client.log_metrics(metrics, step=0)
        return
    _log_with_client(tracker_or_client, parent_run_id, files, metrics)


def _log_with_client(
    client: MlflowClient, run_id: str, files: ReportFiles, metrics: Mapping[str, float]
) -> None:
    import time

    from mlflow.entities import Metric

    uri = client.tracking_uri
    for path in files.paths:
        guarded(
            uri,
            f"uploading {path.name} to run {run_id}",
            partial(client.log_artifact, run_id, str(path), ARTIFACT_DIR),
        )
    now = int(time.time() * 1000)
    batch = [Metric(key, value, now, 0) for key, value in metrics.items()]
    guarded(
        uri,
        f"logging the report's metrics to run {run_id}",
        lambda: client.log_batch(run_id, metrics=batch),
    )


# -- glue ------------------------------------------------------------------------------------------


def report_for(
    tracking_uri: str,
    study_or_run_id: str,
    out_dir: Path | None = None,
    log: bool = True,
    *,
    study: Study | None = None,
) -> StudyReport:
    """Find the Study's parent run (by Study name or run id), read its runs, build and write the
    report under ``out_dir`` (default ``out/<study>``) and, with ``log``, log it to the parent run.

    Arm order, reference arm and ``k`` come from ``study`` when given (the runner has it), else
    from the Study document stored with the parent run (``spec/study.yaml``), else from the runs
    themselves (arms alphabetically, the first as reference, with a note saying so). Raises
    :class:`NoFinishedRuns` when no run finished, :class:`TrackingError` when the Study or its
    store cannot be read.
    """
    parent_id = find_parent_run(tracking_uri, study_or_run_id)
    parent, histories = load_study_runs(tracking_uri, parent_id)
    benchmark = infer_benchmark(histories)
    name, arms, reference, k, notes = _layout(parent, histories, study, benchmark)
    if not histories:
        left = f" ({len(parent.skipped)} runs not counted: {parent.skipped[0]} ...)"
        raise NoFinishedRuns(
            f"Study {name!r} (parent run {parent_id}) at {tracking_uri} has no FINISHED runs"
            + (left if parent.skipped else "")
        )
    report = build_report(
        name, reference, arms, histories, k, notes=[*parent.skipped, *notes], benchmark=benchmark
    )
    files = write_report(report, histories, out_dir or Path("out") / name)
    if log:
        log_report(make_client(tracking_uri), parent_id, files)
    return report


def _layout(
    parent: StudyParent, histories: Sequence[RunHistory], study: Study | None, benchmark: str
) -> tuple[str, list[str], str, int, list[str]]:
    """(study name, arms in order, reference arm, k, notes) for the report."""
    from sarl.spec.loader import SpecError, validate_study

    notes: list[str] = []
    if study is None and parent.document is not None:
        try:
            study = validate_study(parent.document, "the parent run's Study document")
        except SpecError as e:
            notes.append(f"Study document of the parent run not used: {e}")
    if study is not None:
        arms = [a.name for a in study.spec.arms]
        spec_k = study.spec.base.evaluation.k
        logged = any(spec_k in logged_ks(h, benchmark) for h in histories) or not histories
        k = spec_k if logged else infer_k(histories, spec_k, benchmark)
        return study.name, arms, study.spec.reference_arm, k, notes
    name = parent.study or parent.run_id
    arms = sorted({h.arm for h in histories})
    reference = arms[0] if arms else "-"
    notes.append(
        f"no Study document with the parent run: arms in alphabetical order, reference "
        f"{reference} (the first)"
    )
    k = infer_k(histories, _DEFAULT_K, benchmark)
    return name, arms or [reference], reference, k, notes


__all__ = [
    "ARTIFACT_DIR",
    "COMPARED",
    "CURVES_FILE",
    "FLAG_LENGTH_COLLAPSE",
    "FLAG_SR_UP_ACCURACY_DOWN",
    "FLAG_TEXT",
    "HEADLINE",
    "LENGTH_COLLAPSE_RATIO",
    "MARKDOWN_FILE",
    "SUMMARY_FILE",
    "NoFinishedRuns",
    "ReportFiles",
    "StudyReport",
    "arm_cells",
    "arm_columns",
    "build_report",
    "flags",
    "headline_metrics",
    "how_read",
    "log_report",
    "paired_rows",
    "report_for",
    "value_ranges",
    "write_report",
]
