"""Compare MLflow runs: the params that differ, final metrics, and training curves.

Called by ``sarl compare`` (:mod:`sarl.cli.compare`), by ``sarl.compare(...)`` and
``sarl.Client.local().compare(...)`` (:func:`compare`, which also takes the ``RunResult`` s a
notebook holds). Runs are named by id or name, by Study (its arm x seed runs) and/or by
experiment (all its active runs); :mod:`sarl.tracking.lookup` finds them, and an unknown name is
refused with the experiments, Studies and runs the store holds. A Study's parent run is never
compared itself (it logs no curves, and its params are the Study's, not a run's).
:func:`compare_runs` reads everything once into a frozen :class:`Comparison`, which is the one
home of what is shown: its tables (runs with experiment name, arm and seed; params that differ;
final metrics; columns labelled by run name, plus a short id where names repeat) render as HTML
in Jupyter, with rich in a terminal (:mod:`sarl.display`) and as a pandas DataFrame
(:meth:`Comparison.to_frame`); its figure has a panel per curve of
:data:`sarl.tracking.metrics.CURVES` (reward, accuracy, SR, length, KL, entropy) with one colour
per group — a Study arm (its seeds as thin lines, their mean thick) or a run on its own —,
per-step curves smoothed as in the Study report (:meth:`Comparison.figure`, drawn by
:mod:`sarl.viz.comparison`; :func:`plot_curves` writes it as a PNG). Reads go through an explicit
``MlflowClient``, like :mod:`sarl.tracking.tracker`; :mod:`sarl.tracking.store` opens it. pandas
and matplotlib are imported when first used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sarl import display
from sarl.cluster.tenancy import mlflow_experiment_name
from sarl.spec.study import TAG_ARM, TAG_PARENT, TAG_ROLE, TAG_SEED, TAG_STUDY
from sarl.tracking.history import Points, metric_histories
from sarl.tracking.lookup import (
    RUN_ID,
    find_runs,
    get_run,
    is_study_parent,
    known_names,
    search_runs,
)
from sarl.tracking.metrics import curve_metrics
from sarl.tracking.scope import in_namespace
from sarl.tracking.store import (
    TrackingError,
    bound_http_retries,
    guarded,
    make_client,
    preflight,
    sqlite_path,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure
    from mlflow import MlflowClient
    from mlflow.entities import Run
    from rich.table import Table

# Run names can repeat (two runs of one experiment): there, labels carry a short id too.
_SHORT_ID = 8


@dataclass(frozen=True)
class RunSummary:
    """What identifies a run in the comparison. ``experiment``: the experiment's name;
    ``study``, ``parent_run_id``, ``arm``, ``seed``: set for a Study's arm x seed run."""

    run_id: str
    name: str
    status: str  # RUNNING, FINISHED, FAILED, KILLED, SCHEDULED
    experiment_id: str
    experiment: str = ""
    study: str | None = None
    parent_run_id: str | None = None
    arm: str | None = None
    seed: int | None = None

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
    def groups(self) -> dict[str, tuple[str, ...]]:
        """Legend label -> the run ids drawn in one colour: a Study arm's runs (its seeds) under
        the arm's name, every other run on its own under its label (:attr:`labels`). Arms of
        different Studies are told apart by the Study's name (and its parent run's short id
        when one Study was run twice)."""
        labels = self.labels
        parents = {r.parent_run_id: r.study for r in self.runs if r.arm is not None}
        named = list(parents.values())
        out: dict[str, list[str]] = {}
        for run in self.runs:
            if run.arm is None:
                out.setdefault(labels[run.run_id], []).append(run.run_id)
                continue
            label = run.arm
            if len(parents) > 1:
                study = run.study or "?"
                if named.count(run.study) > 1:
                    study += f" ({(run.parent_run_id or '')[:_SHORT_ID]})"
                label = f"{study}/{run.arm}"
            out.setdefault(label, []).append(run.run_id)
        return {label: tuple(ids) for label, ids in out.items()}

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
        arms = any(r.arm is not None for r in self.runs)  # arm and seed columns for Study runs
        runs = display.Table(
            "runs",
            ("run", "id", "status", "experiment", *(("arm", "seed") if arms else ())),
            tuple(
                (
                    labels[r.run_id],
                    r.run_id,
                    r.status,
                    r.experiment or r.experiment_id,
                    *((display.text(r.arm), display.text(r.seed)) if arms else ()),
                )
                for r in self.runs
            ),
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
        """A 2x3 grid (reward, accuracy, SR, length, KL, entropy), one colour per group
        (:attr:`groups`) across panels: a Study arm's seeds as thin lines and their mean thick,
        a run on its own as one line; per-step curves smoothed by a trailing mean (the window is
        in the title); the legend below. A panel no run logged says "no data". A bare
        ``Figure`` (no pyplot state): Jupyter shows it inline, ``savefig`` writes it."""
        from sarl.viz.comparison import comparison_figure

        return comparison_figure(self)

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
    """Compare ``runs`` (run ids or names, Study names, or the ``RunResult`` s of local runs)
    and/or every run of ``experiments`` (with ``latest``, only the newest run of each, or the
    newest Study's runs).

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
    namespace: str = "",
) -> Comparison:
    """Read the runs ``run_ids`` names plus all active runs of ``experiments`` from ``uri``;
    with ``namespace``, of its experiments only (``<ns>/<name>``, :mod:`sarl.tracking.scope`).

    ``run_ids`` may hold run ids, run names (the newest run of that name) and Study names or
    parent runs (the Study's arm x seed runs; :func:`sarl.tracking.lookup.find_runs`). A
    Study's parent run is left out of an experiment's runs. With ``latest``, each experiment
    keeps only its newest run or, when that is a Study's run, the runs of that Study's parent.
    Runs are ordered by group (a Study arm, first mention first), then by seed.

    Raises :class:`TrackingError` naming every unknown run and experiment together with the
    names the store holds, when the store cannot be reached, or when nothing is left to compare;
    ``ValueError`` when both are empty.
    """
    if not run_ids and not experiments:
        raise ValueError("give run ids or names and/or experiment names to compare")
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        # Opening a missing SQLite store would create an empty one; say what happened instead.
        raise TrackingError(f"no MLflow store at {db}: no runs have been logged there")
    preflight(uri)
    bound_http_retries()
    client = make_client(uri)
    experiments = [mlflow_experiment_name(namespace, e) if namespace else e for e in experiments]
    runs = _resolve_runs(client, uri, run_ids, experiments)
    if namespace:
        names = _experiment_names(client, uri, runs)
        runs = in_namespace(runs, [names[r.info.experiment_id] for r in runs], namespace, uri)
    if latest:
        runs = _newest_per_experiment(runs)
    runs = _by_group(runs, _arm_order(client, uri, runs))
    names = _experiment_names(client, uri, runs)
    summaries = tuple(_summary(r, names) for r in runs)
    return Comparison(
        uri=uri,
        runs=summaries,
        differing_params=_differing_params(runs),
        final_metrics={r.info.run_id: dict(r.data.metrics) for r in runs},
        histories={r.info.run_id: _histories(client, uri, r) for r in runs},
    )


def _summary(run: Run, experiment_names: dict[str, str]) -> RunSummary:
    tags = run.data.tags
    arm = tags.get(TAG_ARM) if tags.get(TAG_ROLE) == "arm" else None
    seed = tags.get(TAG_SEED, "")
    return RunSummary(
        run.info.run_id,
        run.info.run_name or "",
        run.info.status,
        run.info.experiment_id,
        experiment=experiment_names.get(run.info.experiment_id, ""),
        study=tags.get(TAG_STUDY) if arm else None,
        parent_run_id=tags.get(TAG_PARENT) if arm else None,
        arm=arm,
        seed=int(seed) if arm and seed.isdigit() else None,
    )


def _resolve_runs(
    client: MlflowClient, uri: str, names: Sequence[str], experiments: Sequence[str]
) -> list[Run]:
    found: dict[str, Run] = {}  # run id -> run, first mention wins the position
    unknown: list[str] = []
    for name in names:
        runs = find_runs(client, uri, name)
        if runs is None:
            unknown.append(f"run id {name!r}" if RUN_ID.match(name.strip()) else f"run {name!r}")
            continue
        for run in runs:
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
        raise TrackingError(f"unknown {', '.join(unknown)} at {uri}; {known_names(client, uri)}")
    for run in search_runs(client, uri, experiment_ids):
        if not is_study_parent(run):  # the Study's runs are compared, not the run grouping them
            found.setdefault(run.info.run_id, run)
    if not found:
        what = ", ".join([*map(repr, names), *(f"experiment {e!r}" for e in experiments)])
        raise TrackingError(f"no runs to compare in {what} at {uri}")
    return list(found.values())


def _newest_per_experiment(runs: list[Run]) -> list[Run]:
    """Keep each experiment's most recently started run — or, when that is an arm x seed run of
    a Study, every run of that Study's parent — in the input order."""
    newest: dict[str, Run] = {}
    for run in runs:
        best = newest.get(run.info.experiment_id)
        if best is None or (run.info.start_time or 0) > (best.info.start_time or 0):
            newest[run.info.experiment_id] = run
    parents = {p for r in newest.values() if (p := _study_parent(r))}
    keep = {r.info.run_id for r in newest.values()}
    return [r for r in runs if r.info.run_id in keep or _study_parent(r) in parents]


def _study_parent(run: Run) -> str | None:
    """The parent run id of a Study's arm x seed run, else ``None``."""
    tags = run.data.tags
    return tags.get(TAG_PARENT) if tags.get(TAG_ROLE) == "arm" else None


def _by_group(runs: list[Run], arm_order: Mapping[str, Sequence[str]]) -> list[Run]:
    """A Study's runs together where the Study is first mentioned, by arm (``arm_order``:
    parent run id -> the Study's arms in document order; unlisted arms after them, by first
    mention), then by seed; other runs keep their place."""
    first_parent: dict[str, int] = {}
    first_arm: dict[tuple[str, str], int] = {}
    keys: list[tuple[int, int, int, int]] = []
    for position, run in enumerate(runs):
        parent = _study_parent(run)
        if parent is None:
            keys.append((position, 0, 0, position))
            continue
        tags = run.data.tags
        arm, seed = tags.get(TAG_ARM, ""), tags.get(TAG_SEED, "")
        listed = list(arm_order.get(parent, ()))
        if arm in listed:
            rank = listed.index(arm)
        else:
            rank = len(listed) + first_arm.setdefault((parent, arm), position)
        order = int(seed) if seed.isdigit() else position
        keys.append((first_parent.setdefault(parent, position), rank, order, position))
    return [runs[i] for i in sorted(range(len(runs)), key=keys.__getitem__)]


def _arm_order(client: MlflowClient, uri: str, runs: Sequence[Run]) -> dict[str, list[str]]:
    """Parent run id -> the Study's arms in document order, from the parent's params
    ``arms.0``, ``arms.1``, ... (what the Study runner logs); a parent that is gone: none."""
    out: dict[str, list[str]] = {}
    for parent in dict.fromkeys(p for r in runs if (p := _study_parent(r))):
        run = get_run(client, uri, parent)
        params = {} if run is None else run.data.params
        arms = sorted(
            (int(k.split(".", 1)[1]), v)
            for k, v in params.items()
            if k.startswith("arms.") and k.split(".", 1)[1].isdigit()
        )
        out[parent] = [arm for _, arm in arms]
    return out


def _experiment_names(client: MlflowClient, uri: str, runs: Sequence[Run]) -> dict[str, str]:
    """Experiment id -> name, for the experiments of ``runs``."""
    names: dict[str, str] = {}
    for experiment_id in dict.fromkeys(r.info.experiment_id for r in runs):
        experiment = guarded(
            uri,
            f"reading experiment {experiment_id}",
            partial(client.get_experiment, experiment_id),
        )
        names[experiment_id] = experiment.name
    return names


def _differing_params(runs: Sequence[Run]) -> dict[str, dict[str, str | None]]:
    keys = sorted({k for r in runs for k in r.data.params})
    out: dict[str, dict[str, str | None]] = {}
    for key in keys:
        values = {r.info.run_id: r.data.params.get(key) for r in runs}
        if len(set(values.values())) > 1:
            out[key] = values
    return out


def _histories(client: MlflowClient, uri: str, run: Run) -> dict[str, Points]:
    keys = [k for k in curve_metrics() if k in run.data.metrics]
    # Only NaN is dropped here (an infinite value stays on the curve), as this reader always did.
    return metric_histories(client, uri, run, keys, keep=lambda v: not math.isnan(v))


# -- pictures and tables ---------------------------------------------------------------------------


def plot_curves(comparison: Comparison, out: Path) -> Path:
    """Write :meth:`Comparison.figure` as a PNG to ``out`` (its folder is created)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    comparison.figure().savefig(out, format="png", dpi=100)
    return out


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
