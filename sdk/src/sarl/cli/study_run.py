"""``sarl study run FILE --local [-j N]``: every arm x seed of a Study, here.

Registered on the ``sarl study`` group by ``main.py`` (the report command lives in
``study.py``). Spec errors and preflight failures print one line and exit 2; the Study runs to
the end even when a run fails (that run is listed, the exit code is 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli.options import DEFAULT_WORKDIR, SetOpt, TrackingUriOpt, WorkdirOpt, fail
from sarl.cli.where import here_or_fail
from sarl.workdir import resolve_workdir

if TYPE_CHECKING:
    from sarl.study.runner import StudyResult


def run_command(
    study: Annotated[
        Path,
        typer.Argument(
            help="Study YAML (apiVersion sarl.dev/v1alpha1, kind Study).",
            metavar="FILE",
            show_default=False,
        ),
    ],
    local: Annotated[
        bool,
        typer.Option(
            "--local", help="Run every arm x seed here. The default when no cluster is configured."
        ),
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "-j",
            "--jobs",
            min=1,
            metavar="N",
            help="Runs at once (processes; torch threads are split between them). "
            "Default: spec.parallelism, else 1.",
        ),
    ] = None,
    sets: SetOpt = None,
    tracking_uri: TrackingUriOpt = None,
    workdir: WorkdirOpt = DEFAULT_WORKDIR,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Report folder. Default: out/<study>.",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a Study here with --local: every arm x seed, then its report.

    Re-running skips finished runs and resumes interrupted ones.
    At the end the report (summary.json, report.md, curves.png) is written and logged.
    An Experiment runs with `sarl run FILE --local`.
    """
    from sarl.runner.preflight import PreflightError
    from sarl.spec.loader import SpecError, validate_study
    from sarl.spec.overrides import load_with_sets
    from sarl.spec.study import STUDY_KIND

    try:
        data, label = load_with_sets(study, sets)
        kind = data.get("kind", STUDY_KIND)
        if kind == "Experiment":
            raise SpecError(
                f"{label}: kind='Experiment': an Experiment runs with `sarl run {study} --local`"
                " (or `sarl submit` on a cluster); a Study has kind: Study"
            )
        doc = validate_study(data, label)
    except SpecError as e:
        raise fail(str(e)) from e
    if not local:
        here_or_fail(doc.name, "sarl study run", study)
    from sarl.runner.faults import RunFailed
    from sarl.storage import StorageError
    from sarl.study.runner import StudyOptions, run_study
    from sarl.tracking.tracker import TrackingError

    opts = StudyOptions(
        workdir=resolve_workdir(workdir),
        tracking_uri=tracking_uri,
        tracking_uri_flag="--tracking-uri",
        jobs=jobs or doc.spec.parallelism,
        out_dir=out,
    )
    try:
        result = run_study(doc, opts)
    except PreflightError as e:
        raise fail(str(e)) from e
    except (StorageError, TrackingError, RunFailed) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(code=1) from e
    _print(result)
    if result.failed:
        raise typer.Exit(code=1)


def _print(result: StudyResult) -> None:
    from sarl.cli.help_style import console as make_console
    from sarl.cli.study import print_report

    console = make_console()
    for o in result.outcomes:
        extra = f": {o.error}" if o.error else ""
        console.print(f"{o.name}: {o.status}{extra}", markup=False)
    if result.report is not None:
        names = ("summary.json", "report.md", "curves.png")
        print_report(result.report, [(result.out_dir or Path()) / name for name in names])
    console.print(f"MLflow parent run {result.parent_run_id} at {result.tracking_uri}")
    for line in result.browse_lines():  # the mlflow ui command, the chart view, each run
        console.print(line, markup=False, soft_wrap=True)  # a URL cut in two cannot be opened
