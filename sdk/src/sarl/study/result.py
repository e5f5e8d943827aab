"""What a local Study returns: :class:`StudyResult` (and each run's :class:`RunOutcome`), with its
rendering for notebooks and terminals.

Built by :func:`sarl.study.runner.run_study`; returned by ``sarl.Client.local().study(...)``. In
Jupyter a result shows the report's table per arm (means over seeds with their intervals, the
change from the start, the paired difference to the reference arm, the reward-hacking flags),
the paired differences, the reward-validity table where the runs logged it, and each run's
outcome (``_repr_html_``); ``rich.print`` and ``print``
show the same (:mod:`sarl.display`). :meth:`StudyResult.to_frame` gives the per-arm numbers to
pandas and :meth:`StudyResult.figure` the curves over seeds to matplotlib (both
imported lazily).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sarl import display

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from sarl.study.aggregate import StudyReport

_STATS = ("mean", "low", "high", "n")


@dataclass(frozen=True)
class RunOutcome:
    """What happened to one arm x seed in this invocation."""

    arm: str
    seed: int
    name: str
    status: str  # "finished", "skipped" (already finished), "resumed", "failed"
    run_id: str | None = None
    error: str | None = None


@dataclass
class StudyResult(display.Rendered):
    """A finished local Study: its parent run, each run's outcome and the report."""

    _text_width: ClassVar[int] = 160  # the arms table is wide

    study: str
    parent_run_id: str
    tracking_uri: str
    outcomes: list[RunOutcome] = field(default_factory=list)
    report: StudyReport | None = None
    out_dir: Path | None = None
    experiment_id: str | None = None  # the MLflow experiment holding the parent and its runs

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def curves_png(self) -> Path | None:
        """The curves PNG the report wrote (per arm the mean over seeds, and each seed's line
        or, from 3 seeds, the 95 % band)."""
        return None if self.out_dir is None else self.out_dir / "curves.png"

    # -- data ------------------------------------------------------------------------------------

    def tables(self) -> dict[str, Any]:
        """The report's tables as pandas DataFrames (``runs``, ``arms``, ``paired``; long form)."""
        if self.report is None:
            return {}
        return self.report.to_dataframes()

    def to_frame(self) -> pd.DataFrame:
        """One row per arm; columns ``(metric, stat)`` for every aggregate of the report
        (``<metric>_start|_end|_change``) with stats ``mean``, ``low``, ``high`` (the interval
        over seeds; NaN from one seed) and ``n`` (seeds). Empty when no run finished."""
        import pandas as pd

        columns = pd.MultiIndex.from_tuples([], names=["metric", "stat"])
        if self.report is None:
            return pd.DataFrame(index=pd.Index([], name="arm"), columns=columns)
        report = self.report
        keys = list(dict.fromkeys(k for arm in report.arms for k in report.aggregate[arm]))
        columns = pd.MultiIndex.from_product([keys, _STATS], names=["metric", "stat"])
        rows = [
            [
                _nan(getattr(report.aggregate[arm][key], stat))
                if key in report.aggregate[arm]
                else float("nan")
                for key in keys
                for stat in _STATS
            ]
            for arm in report.arms
        ]
        return pd.DataFrame(rows, index=pd.Index(report.arms, name="arm"), columns=columns)

    def figure(self) -> Figure:
        """The report's curves (held-out avg@k, SR, length, training accuracy, KL, entropy): per
        arm the mean over seeds with each seed's line or, from 3 seeds, the 95 % interval band
        (:mod:`sarl.study.plot`), read back from MLflow. A bare
        ``Figure``: Jupyter shows it inline. ``ValueError`` when no run finished."""
        from sarl.study.history import load_study_runs
        from sarl.study.plot import curves_figure

        if self.report is None:
            raise ValueError(f"Study {self.study!r} has no finished runs: nothing to draw")
        _, histories = load_study_runs(self.tracking_uri, self.parent_run_id)
        return curves_figure(
            histories, self.report.arms, k=self.report.k, benchmark=self.report.benchmark
        )

    def browse_lines(self) -> list[str]:
        """How to see the Study in MLflow's UI: the ``mlflow ui`` command for a local store, the
        experiment's chart view (one colour per arm) and each run's page
        (:func:`sarl.tracking.describe.browse_lines`, as a local run prints)."""
        from sarl.tracking.describe import browse_lines, chart_url, ui_base, ui_url

        base = ui_base(self.tracking_uri)
        if base is None or self.experiment_id is None:
            return []
        eid = self.experiment_id
        pages = [(f"Study {self.study}: chart view, one colour per arm", chart_url(base, eid))]
        pages += [(f"run {o.name}", ui_url(base, eid, o.run_id)) for o in self.outcomes if o.run_id]
        return browse_lines(self.tracking_uri, pages)

    # -- rendering -------------------------------------------------------------------------------

    def _section(self) -> display.Section:
        counts: dict[str, int] = {}
        for o in self.outcomes:
            counts[o.status] = counts.get(o.status, 0) + 1
        tally = ", ".join(f"{n} {status}" for status, n in counts.items()) or "none"
        lines = [f"MLflow parent run {self.parent_run_id} at {self.tracking_uri}"]
        lines += self.browse_lines()
        tables: list[display.Table] = []
        if self.report is not None:
            tables += _report_tables(self.report)
            lines.append(_how_read(self.report))
            if self.out_dir is not None:
                lines.append(f"report files: {self.out_dir}")
        else:
            lines.append("no report: no run finished")
        tables.append(
            display.Table(
                "runs",
                ("run", "arm", "seed", "status", "error"),
                tuple((o.name, o.arm, str(o.seed), o.status, o.error or "") for o in self.outcomes),
            )
        )
        heading = f"Study {self.study}: {len(self.outcomes)} runs ({tally})"
        return display.Section(heading, tables, lines)


def _report_tables(report: StudyReport) -> list[display.Table]:
    from sarl.study.render import (
        arm_cells,
        arm_columns,
        paired_rows,
        validity_columns,
        validity_rows,
    )

    columns = arm_columns(report)
    arms = display.Table(
        f"arms (reference: {report.reference})",
        tuple(columns),
        tuple(tuple(arm_cells(report, arm)) for arm in report.arms),
        caption="; ".join(report.notes),
    )
    tables = [arms]
    rows = paired_rows(report)
    if rows:
        tables.append(
            display.Table(
                f"paired differences vs {report.reference} (arm − reference, same seeds)",
                ("arm", "metric", "Δ end", "Δ change"),
                tuple(tuple(r) for r in rows),
            )
        )
    validity = validity_rows(report)
    if validity:
        tables.append(
            display.Table(
                "reward validity vs correctness (first → last quarter of training, over seeds)",
                tuple(validity_columns()),
                tuple(tuple(r) for r in validity),
            )
        )
    return tables


def _how_read(report: StudyReport) -> str:
    from sarl.study.render import how_read

    return how_read(report).replace("`", "")


def _nan(value: float | int | None) -> float:
    return float("nan") if value is None else float(value)


__all__ = ["RunOutcome", "StudyResult"]
