"""``sarl tracking``: what a run's tracking spool still holds, and sending it to MLflow.

A run that ended while MLflow was away leaves its unsent metrics, tags and artifacts in its spool
(:mod:`sarl.tracking.spool`; a local run's is ``<workdir>/runs/<name>/tracking/<run id>``, and the
run's last line names it). ``sarl tracking status DIR`` prints how many records wait;
``sarl tracking flush DIR`` sends them in order (retrying while MLflow is away, up to
``--timeout``), exactly once, and closes the run with the status it ended with. Exit codes: 0 all
sent, 1 records still waiting (MLflow did not answer in time), 2 not a spool. Registered in
``main.py`` as the ``tracking`` sub-app; MLflow is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli.options import fail

if TYPE_CHECKING:
    from sarl.tracking.spool import Spool

app = typer.Typer(help="A run's tracking spool: records waiting for MLflow.")

SpoolArg = Annotated[
    Path,
    typer.Argument(help="The run's spool directory (named by the run's last line).", metavar="DIR"),
]


@app.callback()
def _tracking() -> None:
    """A run's tracking spool: records waiting for MLflow."""


@app.command("status")
def status_command(spool_dir: SpoolArg) -> None:
    """How many records of the run wait in DIR."""
    spool = _open(spool_dir)
    try:
        typer.echo(
            f"{spool.waiting} records of run {spool.run_id} waiting for {spool.tracking_uri}"
        )
    finally:
        spool.close()


@app.command("flush")
def flush_command(
    spool_dir: SpoolArg,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds to keep trying while MLflow does not answer.",
            metavar="SECONDS",
        ),
    ] = 600.0,
) -> None:
    """Send the records waiting in DIR to MLflow, in order and exactly once."""
    from sarl.tracking.drainer import flush
    from sarl.tracking.store import bound_http_retries, make_client
    from sarl.tracking.tracker import TrackingError

    spool = _open(spool_dir)
    try:
        waiting = spool.waiting
        bound_http_retries()
        try:
            client = make_client(spool.tracking_uri)
        except TrackingError as e:
            raise fail(str(e)) from e
        left, rejected = flush(spool, client, timeout)
    finally:
        spool.close()
    sent = waiting - left - rejected
    typer.echo(f"run {spool.run_id}: {sent} records sent to {spool.tracking_uri}")
    if rejected:
        typer.echo(f"warning: {rejected} records rejected by MLflow (see the log)", err=True)
    if left:
        typer.echo(
            f"error: {left} records still waiting: MLflow did not answer within {timeout:g} s; "
            f"run `sarl tracking flush {spool_dir}` again",
            err=True,
        )
        raise typer.Exit(code=1)


def _open(spool_dir: Path) -> Spool:
    from sarl.tracking.spool import Spool, SpoolError

    try:
        return Spool.open_existing(spool_dir)
    except (SpoolError, OSError) as e:
        raise fail(str(e)) from e
