"""Compare MLflow runs: the params that differ, final metrics, and training curves.

Called by ``sarl compare`` (:mod:`sarl.cli.compare`), by ``sarl.compare(...)`` and
``sarl.Client.local().compare(...)`` (:func:`compare`, which also takes the ``RunResult`` s a
notebook holds). Runs are named by id and/or by experiment (all its active runs).
:func:`compare_runs` reads everything once into a frozen :class:`Comparison`, which is the one
home of what is shown: its tables (runs, params that differ, final metrics; columns labelled by
run name, plus a short id where names repeat) render as HTML in Jupyter, with rich in a terminal
(:mod:`sarl.display`) and as a pandas DataFrame (:meth:`Comparison.to_frame`); its figure has a
panel per curve of :data:`sarl.tracking.metrics.CURVES` (reward, accuracy, SR, length, KL,
entropy) and one line per run (:meth:`Comparison.figure`; :func:`plot_curves` writes it as a
PNG). Reads go through an explicit ``MlflowClient``, like :mod:`sarl.tracking.tracker`;
:mod:`sarl.tracking.store` opens it. pandas and matplotlib are imported when first used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sarl import display
from sarl.tracking.metrics import CURVES, curve_metrics
from sarl.tracking.store import (
    TrackingError,
    bound_http_retries,
    error_code,
    guarded,
    make_client,
    one_line,
    preflight,
    sqlite_path,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from mlflow import MlflowClient
    from mlflow.entities import Run
    from rich.table import Table

# Run names can repeat (two runs of one experiment): there, labels carry a short id too.
_SHORT_ID = 8
# A tab10-like palette, spelled out so colours do not depend on matplotlib's style settings.
_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip


@dataclass(frozen=True)
class RunSummary:
    """What identifies a run in the comparison."""

    run_id: str
    name: str
    status: str  # RUNNING, FINISHED, FAILED, KILLED, SCHEDULED
    experiment_id: str

    @property
    def label(self) -> str:
        """``name (first 8 characters of the id)``: names the run whatever the other runs are
        (:attr:`Comparison.labels` drops the id where the name alone is unique)."""
        return f"{self.name} ({self.run_id[:_SHORT_ID]})"


class HasRunId(Protocol):
    """What :func:`compare` takes besides run ids: a ``RunResult`` (its run and where it is)."""

    @property
    def run_id(self) -> str: ...

    @property
    def tracking_uri(self) -> str: ...


@dataclass(frozen=True)
class Comparison(display.Rendered):
    """Runs side by side. Keys of the per-run dicts are run ids, in ``runs`` order.

    ``differing_params``: only params whose value is not the same in every run (a run that lacks
    the param has ``None``). ``final_metrics``: every metric's last value (highest step; MLflow's
    "latest" value). ``histories``: the curve metrics as ``(step, value)`` sorted by step, NaN
    dropped; a step logged twice (a resumed run repeating steps) keeps its latest value.
    """

    uri: str
    runs: tuple[RunSummary, ...]
    differing_params: dict[str, dict[str, str | None]] = field(default_factory=dict)
    final_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    histories: dict[str, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        """Run id -> how tables and legends name the run: its name, or ``name (short id)`` when
        another run of the comparison has the same name (or it has none)."""
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.name] = counts.get(run.name, 0) + 1
        labels = {
            r.run_id: r.name if r.name and counts[r.name] == 1 else r.label for r in self.runs
        }
        if len(set(labels.values())) < len(labels):  # two ids sharing 8 characters: full ids
            labels = {r.run_id: f"{r.name} ({r.run_id})" for r in self.runs}
        return labels

    # -- tables ----------------------------------------------------------------------------------

    def tables(self) -> tuple[display.Table, display.Table, display.Table]:
        """The runs, the params that differ, the final metrics (the last two: runs as columns)."""
        labels = self.labels
        runs = display.Table(
            "runs",
            ("run", "id", "status", "experiment"),
            tuple((labels[r.run_id], r.run_id, r.status, r.experiment_id) for r in self.runs),
        )
        columns = tuple(labels[r.run_id] for r in self.runs)
        params = display.Table(
            "params that differ",
            ("param", *columns),
            tuple(
                (key, *(display.text(values.get(r.run_id)) for r in self.runs))
                for key, values in self.differing_params.items()
            ),
            caption="" if self.differing_params else "all runs have the same params",
        )
        keys = self.metric_keys()
        metrics = display.Table(
            "final metrics",
            ("metric", *columns),
            tuple(
                (
                    key,
                    *(
                        display.number(self.final_metrics.get(r.run_id, {}).get(key))
                        for r in self.runs
                    ),
                )
                for key in keys
            ),
            numeric=frozenset(range(1, len(columns) + 1)),
            caption="" if keys else "no metrics logged",
        )
        return runs, params, metrics

    def metric_keys(self) -> list[str]:
        """Every metric any run logged, sorted."""
        return sorted({k for m in self.final_metrics.values() for k in m})

    def to_frame(self) -> pd.DataFrame:
        """Params that differ and final metrics, one column per run (labelled as in
        :attr:`labels`); rows indexed by ``(kind, name)`` with kind ``param`` or ``metric``.
        Params are strings (``None`` where a run lacks one), metrics floats (NaN where missing);
        ``frame.loc["metric"].astype(float)`` gives the numbers alone.
        """
        import pandas as pd

        labels = self.labels
        rows: dict[tuple[str, str], list[Any]] = {}
        for key, values in self.differing_params.items():
            rows[("param", key)] = [values.get(r.run_id) for r in self.runs]
        for key in self.metric_keys():
            rows[("metric", key)] = [
                self.final_metrics.get(r.run_id, {}).get(key, float("nan")) for r in self.runs
            ]
        index = pd.MultiIndex.from_tuples(list(rows), names=["kind", "name"])
        columns = pd.Index([labels[r.run_id] for r in self.runs], name="run")
        # object dtype: a column holds a run's params (strings) and its metrics (floats).
        return pd.DataFrame(list(rows.values()), index=index, columns=columns, dtype=object)

    def curves_frame(self) -> pd.DataFrame:
        """The curves in long form: one row per ``run`` (label), ``metric``, ``step``, ``value``."""
        import pandas as pd

        labels = self.labels
        rows = [
            (labels[run_id], metric, step, value)
            for run_id, history in self.histories.items()
            for metric, points in history.items()
            for step, value in points
        ]
        return pd.DataFrame(rows, columns=["run", "metric", "step", "value"])

    # -- pictures --------------------------------------------------------------------------------

    def figure(self) -> Figure:
        """A 2x3 grid (reward, accuracy, SR, length, KL, entropy), one line per run, one colour
        per run across panels, the legend below. A panel no run logged says "no data". A bare
        ``Figure`` (no pyplot state): Jupyter shows it inline, ``savefig`` writes it."""
        return _figure(self)

    # -- rendering -------------------------------------------------------------------------------

    def _section(self) -> display.Section:
        count = len(self.runs)
        return display.Section(
            f"Comparison of {count} run{'s' if count != 1 else ''}", self.tables(), (self.uri,)
        )


def compare(
    *runs: str | HasRunId,
    experiments: Sequence[str] = (),
    latest: bool = False,
    tracking_uri: str | None = None,
) -> Comparison:
    """Compare ``runs`` (run ids, or the ``RunResult`` s of local runs) and/or every run of
    ``experiments`` (only the newest of each with ``latest``).

    The store is ``tracking_uri``, else the one the given results logged to (they must share
    one), else the local store ``./.sarl/mlflow.db``. Errors as :func:`compare_runs`;
    ``ValueError`` when results from different stores are mixed without a ``tracking_uri``.
    """
    from sarl.tracking.store import default_tracking_uri

    ids = [r if isinstance(r, str) else r.run_id for r in runs]
    stores = list(dict.fromkeys(r.tracking_uri for r in runs if not isinstance(r, str)))
    if tracking_uri is None and len(stores) > 1:
        raise ValueError(
            f"the runs were logged to different stores ({', '.join(stores)}); compare runs of "
            "one store, or pass tracking_uri"
        )
    uri = tracking_uri or (stores[0] if stores else default_tracking_uri())
    return compare_runs(uri, run_ids=ids, experiments=experiments, latest=latest)


def compare_runs(
    uri: str,
    *,
    run_ids: Sequence[str] = (),
    experiments: Sequence[str] = (),
    latest: bool = False,
) -> Comparison:
    """Read the runs ``run_ids`` plus all active runs of ``experiments`` from ``uri``
    (only the newest run of each experiment with ``latest``).

    Raises :class:`TrackingError` naming every unknown run id and experiment, when the store
    cannot be reached, or when the experiments hold no runs; ``ValueError`` when both are empty.
    """
    if not run_ids and not experiments:
        raise ValueError("give run ids and/or experiment names to compare")
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        # Opening a missing SQLite store would create an empty one; say what happened instead.
        raise TrackingError(f"no MLflow store at {db}: no runs have been logged there")
    preflight(uri)
    bound_http_retries()
    client = make_client(uri)
    runs = _resolve_runs(client, uri, run_ids, experiments)
    if latest:
        runs = _newest_per_experiment(runs)
    summaries = tuple(
        RunSummary(r.info.run_id, r.info.run_name or "", r.info.status, r.info.experiment_id)
        for r in runs
    )
    return Comparison(
        uri=uri,
        runs=summaries,
        differing_params=_differing_params(runs),
        final_metrics={r.info.run_id: dict(r.data.metrics) for r in runs},
        histories={r.info.run_id: _histories(client, uri, r) for r in runs},
    )


def _resolve_runs(
    client: MlflowClient, uri: str, run_ids: Sequence[str], experiments: Sequence[str]
) -> list[Run]:
    found: dict[str, Run] = {}  # run id -> run, first mention wins the position
    unknown: list[str] = []
    for run_id in run_ids:
        try:
            run = client.get_run(run_id)
        except Exception as e:
            if error_code(e) not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise TrackingError(f"reading run {run_id!r} at {uri} failed: {one_line(e)}") from e
            unknown.append(f"run id {run_id!r}")
            continue
        found.setdefault(run.info.run_id, run)
    experiment_ids: list[str] = []
    for name in experiments:
        experiment = guarded(
            uri, f"looking up experiment {name!r}", partial(client.get_experiment_by_name, name)
        )
        if experiment is None:
            unknown.append(f"experiment {name!r}")
        else:
            experiment_ids.append(experiment.experiment_id)
    if unknown:
        raise TrackingError(f"unknown {', '.join(unknown)} at {uri}")
    for run in _search(client, uri, experiment_ids):
        found.setdefault(run.info.run_id, run)
    if not found:
        raise TrackingError(f"no runs in experiment {', '.join(map(repr, experiments))} at {uri}")
    return list(found.values())


def _newest_per_experiment(runs: list[Run]) -> list[Run]:
    """Keep each experiment's most recently started run, in the input order."""
    newest: dict[str, Run] = {}
    for run in runs:
        best = newest.get(run.info.experiment_id)
        if best is None or (run.info.start_time or 0) > (best.info.start_time or 0):
            newest[run.info.experiment_id] = run
    keep = {r.info.run_id for r in newest.values()}
    return [r for r in runs if r.info.run_id in keep]


def _search(client: MlflowClient, uri: str, experiment_ids: list[str]) -> list[Run]:
    """All active runs of the experiments, oldest first (every page)."""
    runs: list[Run] = []
    token: str | None = None
    while experiment_ids:
        page = guarded(
            uri,
            "searching runs",
            partial(
                client.search_runs,
                experiment_ids,
                order_by=["attributes.start_time ASC"],
                page_token=token,
            ),
        )
        runs.extend(page)
        token = page.token
        if not token:
            break
    return runs


def _differing_params(runs: Sequence[Run]) -> dict[str, dict[str, str | None]]:
    keys = sorted({k for r in runs for k in r.data.params})
    out: dict[str, dict[str, str | None]] = {}
    for key in keys:
        values = {r.info.run_id: r.data.params.get(key) for r in runs}
        if len(set(values.values())) > 1:
            out[key] = values
    return out


def _histories(client: MlflowClient, uri: str, run: Run) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for key in curve_metrics():
        if key not in run.data.metrics:
            continue
        history = guarded(
            uri,
            f"reading {key} of run {run.info.run_id}",
            partial(client.get_metric_history, run.info.run_id, key),
        )
        latest: dict[int, tuple[int, float]] = {}  # step -> (timestamp, value)
        for m in history:
            if not math.isnan(m.value) and m.timestamp >= latest.get(m.step, (-1, 0.0))[0]:
                latest[m.step] = (m.timestamp, m.value)
        out[key] = [(step, latest[step][1]) for step in sorted(latest)]
    return out


# -- pictures and tables ---------------------------------------------------------------------------


def plot_curves(comparison: Comparison, out: Path) -> Path:
    """Write :meth:`Comparison.figure` as a PNG to ``out`` (its folder is created)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    comparison.figure().savefig(out, format="png", dpi=100)
    return out


def _figure(comparison: Comparison) -> Figure:
    from matplotlib.lines import Line2D

    labels = comparison.labels
    fig = display.figure(figsize=(13, 7.8), layout="constrained")
    for ax, curve in zip(fig.subplots(2, 3).flat, CURVES, strict=True):
        _draw_panel(ax, comparison, curve.title, curve.metrics)
    handles = [
        Line2D([], [], color=_color(i), lw=2, label=labels[run.run_id])
        for i, run in enumerate(comparison.runs)
    ]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4))
    count = len(comparison.runs)
    fig.suptitle(f"sarl compare: {count} run{'s' if count != 1 else ''}", fontweight="bold")
    return fig


def _draw_panel(ax: Axes, comparison: Comparison, title: str, metrics: tuple[str, ...]) -> None:
    from matplotlib.ticker import MaxNLocator

    labels = comparison.labels
    used: list[str] = []
    missing: list[str] = []
    for i, run in enumerate(comparison.runs):
        history = comparison.histories.get(run.run_id, {})
        metric = next((m for m in metrics if history.get(m)), None)
        if metric is None:
            missing.append(labels[run.run_id])
            continue
        steps, values = zip(*history[metric], strict=True)
        # Markers make short runs (a handful of steps, or one) visible; long ones stay clean.
        ax.plot(steps, values, color=_color(i), lw=1.8, marker="o" if len(steps) <= 30 else "")
        used.append(metric)
    ax.set_title(title, fontweight="bold")
    if not used:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", color="#888888", fontsize=14,
                transform=ax.transAxes)  # fmt: skip
        ax.set_xticks([])
        ax.set_yticks([])
        return
    # Name the runs with no line here, so an absent line is not mistaken for a hidden one; under
    # the axis rather than inside it, where it would cover data.
    ax.set_xlabel("step" + (f"\n(no data: {', '.join(missing)})" if missing else ""))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_ylabel(" | ".join(dict.fromkeys(used)), fontsize=9)
    ax.grid(alpha=0.3)


def _color(index: int) -> str:
    return _COLORS[index % len(_COLORS)]


def render_tables(comparison: Comparison) -> tuple[Table, ...]:
    """:meth:`Comparison.tables` as rich tables (what ``sarl compare`` prints)."""
    return tuple(t.to_rich() for t in comparison.tables())


__all__ = [
    "Comparison",
    "HasRunId",
    "RunSummary",
    "compare",
    "compare_runs",
    "plot_curves",
    "render_tables",
]
