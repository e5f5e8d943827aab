"""The Study report: read a Study's runs, build its numbers, write and log the three files.

Called by ``sarl study report`` (:mod:`sarl.cli.study`) and by the local Study runner at the end
of a Study, both through :func:`report_for`: find the parent run, read the arm x seed runs
(:mod:`sarl.study.history`), :func:`~sarl.study.aggregate.build_report` (pure),
:func:`write_report` (``summary.json``, ``report.md``, ``curves.png``), :func:`log_report` (those
files under ``report/`` of the parent run plus headline metrics ``study/<arm>/<metric>`` on it).

The parts live in modules of their own, by what they do: what is compared and how
(:mod:`sarl.study.aggregate`, with the intervals of :mod:`sarl.study.stats`), the reward-hacking
flags (:mod:`sarl.study.flags`), the text of ``report.md`` and of the report's tables
(:mod:`sarl.study.render`), the curves (:mod:`sarl.study.plot`). Their public names are
re-exported here, so ``from sarl.study.report import build_report, StudyReport`` keeps working.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sarl.study.aggregate import StudyReport, build_report, value_ranges
from sarl.study.flags import (
    FLAG_LENGTH_COLLAPSE,
    FLAG_SR_UP_ACCURACY_DOWN,
    FLAG_TEXT,
    FLAG_VALIDITY_AT_CHANCE,
    LENGTH_COLLAPSE_RATIO,
    flags,
)
from sarl.study.history import (
    COMPARED,
    RunHistory,
    StudyParent,
    find_parent_run,
    infer_benchmark,
    infer_k,
    load_study_runs,
    logged_ks,
)
from sarl.study.render import arm_cells, arm_columns, how_read, paired_rows
from sarl.tracking.metrics import metric_key
from sarl.tracking.store import TrackingError, guarded, make_client

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from sarl.spec.study import Study
    from sarl.tracking.tracker import Tracker

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
#: Reward-validity aggregates logged as ``study/<arm>/validity/<reward>/<name>`` (their means).
HEADLINE_VALIDITY: tuple[str, ...] = ("auroc_end", "pair_agreement_end")
_DEFAULT_K = 4  # EvaluationSpec's default; only names metrics when no run evaluated


class NoFinishedRuns(TrackingError, ValueError):
    """The Study has no FINISHED arm x seed run yet, so there is nothing to report.

    A :class:`TrackingError` (what reading the Study raises) and a ``ValueError`` (nothing is
    wrong with the store, the input is empty), so callers may catch either.
    """


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
    """Parent-run metrics from a ``summary.json`` document (see :data:`HEADLINE` and
    :data:`HEADLINE_VALIDITY`), plus ``study/<arm>/flags``, the number of flags raised."""
    out: dict[str, float] = {}
    for arm, data in summary["arms"].items():
        prefix = f"study/{metric_key(arm)}"
        for name in HEADLINE:
            if (mean := data["aggregate"].get(name, {}).get("mean")) is not None:
                out[f"{prefix}/{name}"] = float(mean)
        for name in HEADLINE_PAIRED:
            if (mean := data["vs_reference"].get(name, {}).get("mean")) is not None:
                out[f"{prefix}/vs_reference/{name}"] = float(mean)
        for reward, figures in data.get("validity", {}).items():
            for name in HEADLINE_VALIDITY:
                if (mean := figures["aggregate"].get(name, {}).get("mean")) is not None:
                    out[f"{prefix}/validity/{metric_key(reward)}/{name}"] = float(mean)
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
    "FLAG_VALIDITY_AT_CHANCE",
    "HEADLINE",
    "HEADLINE_VALIDITY",
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
