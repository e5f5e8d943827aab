"""``sarl study``: Studies — arms x seeds of one Experiment, compared.

``sarl study report STUDY|RUN_ID`` reads a Study's runs back from MLflow and writes its report
(:func:`sarl.study.report.report_for`): prints its tables as rich tables (the ones a notebook
shows for a Study, :func:`print_report`, also used by ``sarl study run``) and the paths of
``summary.json``, ``report.md`` and ``curves.png``. Errors print one ``error:`` line on stderr and
exit 2. Registered in ``main.py`` as the ``study`` sub-app; MLflow, pandas and matplotlib are
imported inside the commands so ``sarl --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli.options import DEFAULT_WORKDIR, WorkdirOpt, fail
from sarl.workdir import resolve_workdir

if TYPE_CHECKING:
    from sarl.study.aggregate import StudyReport

app = typer.Typer(help="Studies: arms x seeds of one Experiment, compared.")


@app.callback()
def _study() -> None:
    """Studies: arms x seeds of one Experiment, compared."""
    # A callback keeps `study` a command group even while it has a single command (typer would
    # otherwise run that command directly, without its name).


@app.command("report")
def report_command(
    study: Annotated[
        str,
        typer.Argument(
            help="Study name (its newest parent run) or the parent run's MLflow id.",
            metavar="STUDY|RUN_ID",
            show_default=False,
        ),
    ],
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--tracking-uri",
            help="MLflow server or store. Default: the store under --workdir.",
            metavar="URI",
            show_default=False,
        ),
    ] = None,
    workdir: WorkdirOpt = DEFAULT_WORKDIR,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Folder for the report files. Default: out/<study>.",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    log: Annotated[
        bool,
        typer.Option("--log/--no-log", help="Also log the report to the Study's parent run."),
    ] = True,
    finish: Annotated[
        bool,
        typer.Option(
            "--finish",
            help="Then mark the parent run FINISHED (the Study is over; the cluster's report "
            "Job does this, a local `sarl study run` finishes its parent itself). Needs the "
            "parent run's id: a run found by Study name is never closed.",
        ),
    ] = False,
) -> None:
    """Report a Study: each arm over seeds, paired against the reference arm, with flags.

    Prints its tables and writes summary.json, report.md and curves.png.
    The curves: held-out accuracy, SR, length, KL and entropy per arm.
    With reward validity logged: its table, its curves, the flag of a reward up at chance.
    """
    from sarl.study.history import find_parent_run
    from sarl.study.report import ReportFiles, report_for
    from sarl.tracking.lookup import RUN_ID
    from sarl.tracking.tracker import TrackingError, default_tracking_uri

    if finish and not RUN_ID.match(study.strip()):
        # Closing the newest run of a name could close another team's run of that name
        # (issue 36): the cluster's report Job passes the id of the run the operator created.
        raise fail(f"--finish closes one run: pass the parent run's MLflow id, not {study!r}")
    uri = tracking_uri or default_tracking_uri(resolve_workdir(workdir))
    try:
        parent = find_parent_run(uri, study)  # once: the run reported is the run closed
        report = report_for(uri, parent, out, log=log)
    except (TrackingError, ValueError) as e:
        raise fail(str(e)) from e
    except OSError as e:
        raise fail(f"--out {out or 'out/<study>'}: {e.strerror or e}") from e
    if finish:
        _finish_parent(uri, parent)
    files = ReportFiles.under(out or Path("out") / report.study)
    print_report(report, files.paths)


def print_report(report: StudyReport, written: Iterable[Path]) -> None:
    """The report's tables as the CLI prints every result (rich tables: the per-arm table and
    the paired differences a notebook shows for a Study), how to read them, and the files
    ``written``. Off a terminal the lines are wide (help_style.console) so the table stays whole."""
    from sarl import display
    from sarl.cli.help_style import console as make_console
    from sarl.study.render import how_read
    from sarl.study.result import _report_tables  # the notebook's tables: both read alike

    console = make_console()  # piped: wide, not wrapped at 80 columns
    section = display.Section(
        f"Study {report.study}", _report_tables(report), [how_read(report).replace("`", "")]
    )
    console.print(section.to_rich())
    for path in written:
        console.print(f"wrote {path}", markup=False, highlight=False)


def _finish_parent(uri: str, parent: str) -> None:
    """Close the Study's parent run ``parent`` (its id) as FINISHED (one line and exit 2 if
    MLflow refuses)."""
    from sarl.tracking.store import guarded, make_client
    from sarl.tracking.tracker import TrackingError

    try:
        client = make_client(uri)
        guarded(uri, f"closing run {parent}", lambda: client.set_terminated(parent, "FINISHED"))
    except (TrackingError, ValueError) as e:
        raise fail(str(e)) from e
