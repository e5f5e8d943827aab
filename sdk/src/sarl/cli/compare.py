"""``sarl compare``: put MLflow runs side by side — params that differ, final metrics, curves.

Runs are named by id or name, a Study by its name (its arm x seed runs, grouped by arm in the
curves), an experiment by ``-e`` (its runs; a Study's parent run is never one of them). On a
platform with tenants only the caller's namespace's experiments (``--namespace``, else the
kubeconfig context's for a remote server) unless ``--all-namespaces`` (:mod:`sarl.tracking.scope`).

Registered in ``main.py`` as ``app.command("compare")(compare.compare_command)``. The work and the
tables are :mod:`sarl.tracking.compare`'s (the same ``Comparison`` a notebook displays); this
module maps flags onto it and errors onto one ``error:`` line (exit code 2). MLflow and matplotlib
are imported inside the command so ``sarl --help`` stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sarl.cli.options import DEFAULT_WORKDIR, WorkdirOpt, fail
from sarl.workdir import resolve_workdir

RunsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Runs to compare: run ids or names, or a Study's name (its arm x seed runs).",
        metavar="RUN",
        show_default=False,
    ),
]
ExperimentOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--experiment",
        "-e",
        help="Compare every run of this experiment (repeatable).",
        metavar="NAME",
        show_default=False,
    ),
]
TrackingUriOpt = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        help="MLflow tracking URI. Default: the local store under --workdir (DIR/mlflow.db).",
        metavar="URI",
        show_default=False,
    ),
]
OutOpt = Annotated[
    Path, typer.Option("--out", help="Where to write the curves PNG.", metavar="PNG")
]


def compare_command(
    runs: RunsArg = None,
    experiment: ExperimentOpt = None,
    tracking_uri: TrackingUriOpt = None,
    workdir: WorkdirOpt = DEFAULT_WORKDIR,
    out: OutOpt = Path("out/compare.png"),
    latest: Annotated[
        bool,
        typer.Option(
            "--latest",
            help="Only the newest run of each experiment (of a Study's: its newest Study's runs).",
        ),
    ] = False,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Compare this namespace's runs (experiments NAME/...). Default with a remote "
            "tracking server: the kubeconfig context's namespace.",
            metavar="NAME",
            show_default=False,
        ),
    ] = None,
    all_namespaces: Annotated[
        bool,
        typer.Option(
            "--all-namespaces", "-A", help="Compare runs of every namespace you may read."
        ),
    ] = False,
) -> None:
    """Compare runs: params that differ, final metrics, and reward / accuracy / SR / length /
    KL / entropy curves in one PNG (a Study's arms in one colour each, seeds thin, mean thick).
    On a platform with tenants, runs of your namespace's experiments only (``NS/<name>``)."""
    if not runs and not experiment:
        raise fail("give run ids or names (or a Study's name) and/or --experiment NAME")
    from sarl.cli.help_style import console
    from sarl.tracking.compare import compare_runs, plot_curves
    from sarl.tracking.scope import default_namespace
    from sarl.tracking.tracker import TrackingError, default_tracking_uri

    uri = tracking_uri or default_tracking_uri(resolve_workdir(workdir))
    scope = default_namespace(namespace, all_namespaces, uri, os.environ)
    try:
        comparison = compare_runs(
            uri, run_ids=runs or (), experiments=experiment or (), latest=latest, namespace=scope
        )
    except TrackingError as e:
        raise fail(str(e)) from e
    try:
        path = plot_curves(comparison, out)
    except OSError as e:
        raise fail(f"--out {out}: {e.strerror or e}") from e
    console().print(comparison)  # piped: not wrapped at 80 columns
    typer.echo(f"curves: {path}")
