"""``sarl study run STUDY.yaml --local [-j N]``: every arm x seed of a Study, here.

Registered on the ``sarl study`` group by ``main.py`` (the report command lives in
``study.py``). Spec errors and preflight failures print one line and exit 2; the Study runs to
the end even when a run fails (that run is listed, the exit code is 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli.options import fail
from sarl.cli.run import TrackingUriOpt, WorkdirOpt

if TYPE_CHECKING:
    from sarl.study.runner import StudyResult


def run_command(
    study: Annotated[Path, typer.Argument(help="Study YAML (kind: Study).")],
    local: Annotated[bool, typer.Option("--local", help="Run every arm x seed here.")] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "-j",
            "--jobs",
            min=1,
            help="Runs at once (processes; torch threads are split between them). "
            "Default: spec.parallelism, else 1.",
        ),
    ] = None,
    tracking_uri: TrackingUriOpt = None,
    workdir: WorkdirOpt = Path(".sarl"),
    out: Annotated[
        Path | None, typer.Option("--out", help="Report folder. Default: out/<study>.")
    ] = None,
) -> None:
    """Run a Study here with --local: re-running skips finished runs and resumes interrupted
    ones; at the end the report (summary.json, report.md, curves.png) is written and logged."""
    from sarl.runner.preflight import PreflightError
    from sarl.spec.loader import SpecError, load_study

    try:
        doc = load_study(study)
    except SpecError as e:
        raise fail(str(e)) from e
    if not local:
        raise fail(
            f"sarl study run runs on this machine only with --local; to run {doc.name!r} on a "
            f"cluster use `sarl submit {study}`"
        )
    from sarl.storage import StorageError
    from sarl.study.runner import StudyOptions, run_study
    from sarl.tracking.tracker import TrackingError

    opts = StudyOptions(
        workdir=workdir,
        tracking_uri=tracking_uri,
        tracking_uri_flag="--tracking-uri",
        jobs=jobs or doc.spec.parallelism,
        out_dir=out,
    )
    try:
        result = run_study(doc, opts)
    except PreflightError as e:
        raise fail(str(e)) from e
    except (StorageError, TrackingError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(code=1) from e
    _print(result)
    if result.failed:
        raise typer.Exit(code=1)


def _print(result: StudyResult) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console()
    for o in result.outcomes:
        extra = f": {o.error}" if o.error else ""
        console.print(f"{o.name}: {o.status}{extra}", markup=False)
    if result.report is not None:
        console.print(Markdown(result.report.to_markdown()))
        for name in ("summary.json", "report.md", "curves.png"):
            console.print(f"wrote {result.out_dir / name if result.out_dir else name}")
    console.print(f"MLflow parent run {result.parent_run_id} at {result.tracking_uri}")
