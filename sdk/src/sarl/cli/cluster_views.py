"""Plain-text views of Experiments and Studies for ``sarl status`` (aligned like ``kubectl``,
safe to grep): the listing tables and the ``kubectl describe``-like details; and the status lines
``sarl submit --wait``, ``sarl wait`` and ``sarl delete`` print while they wait.

Called by :mod:`sarl.cli.cluster`; reads :mod:`sarl.cluster.models` objects only, so nothing
here talks to the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from sarl.cluster.models import ExperimentInfo, StudyInfo


def _cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _aligned(head: list[str], rows: list[list[str]], indent: str = "") -> str:
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
    return "\n".join(
        indent + "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [head, *rows]
    )


def _listing(
    head: list[str], infos: Sequence[ExperimentInfo | StudyInfo], rows: list[list[str]], ns: bool
) -> str:
    """``table`` and ``study_table``: ``rows`` under ``head``, ``NAMESPACE`` first if ``ns``."""
    if ns:
        head = ["NAMESPACE", *head]
        rows = [[i.namespace, *row] for i, row in zip(infos, rows, strict=True)]
    return _aligned(head, rows)


def table(infos: list[ExperimentInfo], *, with_namespace: bool = False) -> str:
    """``NAME PHASE STEP REWARD MLFLOW AGE`` (``NAMESPACE`` first with ``-A``)."""
    head = ["NAME", "PHASE", "STEP", "REWARD", "MLFLOW", "AGE"]
    rows = [
        [
            i.name,
            _cell(i.phase),
            _cell(i.status.last_step),
            _cell(i.status.last_reward),
            _cell(i.status.mlflow_run_url),
            i.age(),
        ]
        for i in infos
    ]
    return _listing(head, infos, rows, with_namespace)


def study_table(infos: list[StudyInfo], *, with_namespace: bool = False) -> str:
    """``NAME PHASE TOTAL PENDING RUNNING SUCCEEDED FAILED MLFLOW AGE`` (the CRD's columns)."""
    head = ["NAME", "PHASE", "TOTAL", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "MLFLOW", "AGE"]
    rows = [
        [
            i.name,
            _cell(i.phase),
            _cell(i.status.total),
            _cell(i.status.pending),
            _cell(i.status.running),
            _cell(i.status.succeeded),
            _cell(i.status.failed),
            _cell(i.status.mlflow_run_url),
            i.age(),
        ]
        for i in infos
    ]
    return _listing(head, infos, rows, with_namespace)


def details(info: ExperimentInfo) -> str:
    """A ``kubectl describe``-like view of one Experiment, conditions included."""
    st = info.status
    fields = [
        ("Step", _cell(st.last_step)),
        ("Reward", _cell(st.last_reward)),
        ("MLflow run", _cell(st.mlflow_run_url)),
        ("MLflow run id", _cell(st.mlflow_run_id)),
        ("Checkpoint", _cell(st.checkpoint_uri)),
    ]
    return "\n".join(_described(info, fields))


def _described(info: ExperimentInfo | StudyInfo, fields: list[tuple[str, str]]) -> list[str]:
    """``details`` and ``study_details``: name, namespace and phase, the kind's ``fields``,
    generation, age and conditions, one ``Key:  value`` line each."""
    st = info.status
    fields = [
        ("Name", info.name),
        ("Namespace", info.namespace),
        ("Phase", _cell(st.phase)),
        *fields,
        ("Generation", f"{_cell(info.generation)} (observed {_cell(st.observed_generation)})"),
        ("Age", info.age()),
    ]
    out = [f"{k + ':':15}{v}" for k, v in fields]
    return out + _conditions(st.conditions)


def _conditions(conditions: tuple[Any, ...]) -> list[str]:
    out = ["Conditions:" if conditions else "Conditions:    -"]
    for c in conditions:
        reason = f" {c.reason}" if c.reason else ""
        message = f": {c.message}" if c.message else ""
        out.append(f"  {c.type}={c.status}{reason}{message}")
    return out


def study_details(info: StudyInfo, runs: list[ExperimentInfo]) -> str:
    """A ``kubectl describe``-like view of one Study: its runs by phase, the MLflow parent run,
    the report, conditions, and each arm x seed Experiment."""
    st, spec = info.status, info.spec
    arms = [str(a.get("name")) for a in spec.get("arms") or [] if isinstance(a, dict)]
    seeds = [str(s) for s in spec.get("seeds") or []]
    counts = "-"
    if st.total is not None:
        counts = (
            f"{st.total} total: {st.pending or 0} pending, {st.running or 0} running, "
            f"{st.succeeded or 0} succeeded, {st.failed or 0} failed"
        )
    fields = [
        ("Runs", counts),
        ("Arms", ", ".join(arms) or "-"),
        ("Seeds", ", ".join(seeds) or "-"),
        ("Reference", _cell(spec.get("reference") or (arms[0] if arms else ""))),
        ("Parallelism", _cell(spec.get("parallelism") or "all")),
        ("MLflow run", _cell(st.mlflow_run_url)),
        ("MLflow run id", _cell(st.mlflow_parent_run_id)),
        ("Report", _cell(st.report_uri)),
    ]
    out = _described(info, fields)
    if not runs:
        out.append("Experiments:   -")
        return "\n".join(out)
    out.append("Experiments:")
    rows = [
        [
            r.name,
            r.labels.get("sarl.dev/arm", "-"),
            r.labels.get("sarl.dev/seed", "-"),
            _cell(r.phase),
            _cell(r.status.last_step),
            _cell(r.status.last_reward),
        ]
        for r in runs
    ]
    out.append(_aligned(["NAME", "ARM", "SEED", "PHASE", "STEP", "REWARD"], rows, indent="  "))
    return "\n".join(out)


@contextmanager
def wait_progress(name: str) -> Iterator[Callable[[ExperimentInfo | StudyInfo], None]]:
    """A status line on stderr (animated on a terminal; one line per change otherwise)."""
    from rich.console import Console

    console = Console(stderr=True)
    last: list[str] = []

    def line(info: ExperimentInfo | StudyInfo) -> str:
        return f"{name}: {info.status.summary()} (age {info.age()})"

    if console.is_terminal:
        with console.status(f"{name}: waiting for the first status") as status:
            yield lambda info: status.update(line(info))
        return

    def changed(info: ExperimentInfo | StudyInfo) -> None:
        summary = info.status.summary()
        if not last or last[-1] != summary:
            last.append(summary)
            console.print(line(info), highlight=False, soft_wrap=True)

    yield changed


def phase_announcer(what: str) -> Callable[[ExperimentInfo], None]:
    """An ``on_wait`` callback printing ``what`` and the phase once per phase (to stderr)."""
    seen: list[str | None] = []

    def say(info: ExperimentInfo) -> None:
        if not seen or seen[-1] != info.phase:
            seen.append(info.phase)
            typer.echo(f"{what} (phase: {info.phase or '-'})", err=True)

    return say
