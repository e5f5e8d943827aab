"""``sarl tracking``: what a run's tracking spool still holds, and sending it to MLflow.

A run that ended while MLflow was away leaves its unsent metrics, tags and artifacts in its spool
(:mod:`sarl.tracking.spool`; a local run's is ``<workdir>/runs/<name>/tracking/<run id>``, and the
run's last line names it). ``sarl tracking status DIR`` prints how many records wait, were refused
or damaged; it only reads, so it works while the run is alive. ``sarl tracking flush DIR`` sends
them in order (retrying while MLflow is away or refuses the credentials, up to ``--timeout``, the
whole command included), exactly once, and closes the run with the status and end time it ended
with; ``--new-run`` first makes the run again when MLflow lost it (:mod:`sarl.tracking.reattach`).

Exit codes: 0 every record delivered; 1 records still waiting (MLflow did not take them in time,
refused the credentials, or lost the run: the message says which and what to do); 2 not a spool
or a usage error; 3 every record was dealt with but some were set aside (MLflow refused their
content, ``rejected.jsonl``; or damaged, ``quarantine.jsonl``). Registered in ``main.py`` as the
``tracking`` sub-app; MLflow is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli.options import fail

if TYPE_CHECKING:
    from sarl.tracking.drainer import FlushResult
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
    """How many records of the run wait in DIR (read-only: also while the run is alive)."""
    from sarl.tracking.spool import SpoolError, inspect

    try:
        state = inspect(spool_dir)
    except (SpoolError, OSError) as e:
        raise fail(str(e)) from e
    live = " (the run is sending them now)" if state.in_use else ""
    typer.echo(
        f"{state.waiting} records of run {state.run_id} waiting for {state.tracking_uri}{live}"
    )
    for count, what in (
        (state.rejected, "refused by MLflow, kept in rejected.jsonl"),
        (state.quarantined, "damaged, kept in quarantine.jsonl"),
        (state.damaged, "damaged, moved to quarantine.jsonl by the next flush or resume"),
    ):
        if count:
            typer.echo(f"{count} records {what}")


@app.command("flush")
def flush_command(
    spool_dir: SpoolArg,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds to keep trying while MLflow does not answer (the whole command).",
            metavar="SECONDS",
        ),
    ] = 600.0,
    new_run: Annotated[
        bool,
        typer.Option(
            "--new-run",
            help="MLflow lost the run: make it again (same experiment, name, tags, params; "
            "tag sarl.tracking.replaces_run) and send the records there.",
        ),
    ] = False,
) -> None:
    """Send the records waiting in DIR to MLflow, in order and exactly once."""
    import time

    deadline = time.monotonic() + timeout  # --timeout bounds the command, imports included
    from sarl.tracking.drainer import flush
    from sarl.tracking.reattach import new_run as make_new_run
    from sarl.tracking.store import bound_http_retries, make_client
    from sarl.tracking.tracker import TrackingError

    spool = _open(spool_dir)
    try:
        # What there was to send: the records waiting and the damaged lines set aside at open.
        waiting = spool.waiting + spool.quarantined
        _bound_requests(timeout)
        bound_http_retries()
        try:
            client = make_client(spool.tracking_uri)
            if new_run:
                old = spool.run_id
                typer.echo(f"run {old} replaced by new run {make_new_run(spool, client)}")
        except TrackingError as e:
            raise fail(str(e)) from e
        result = flush(spool, client, max(0.0, deadline - time.monotonic()))
    finally:
        spool.close()
    _report(spool_dir, spool.run_id, spool.tracking_uri, waiting, result, timeout)


def _bound_requests(timeout_s: float) -> None:
    """No single MLflow request may outlast the command's --timeout (MLflow reads this variable
    on every request, ``mlflow/utils/rest_utils.py``)."""
    import math
    import os

    current = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT")
    bound = max(1, math.ceil(timeout_s))
    if current is None or not current.isdigit() or int(current) > bound:
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(bound)


def _report(
    spool_dir: Path, run_id: str, uri: str, waiting: int, result: FlushResult, timeout: float
) -> None:
    sent = waiting - result.left - result.rejected - result.quarantined
    typer.echo(f"run {run_id}: {sent} records sent to {uri}")
    if result.rejected or result.quarantined:
        typer.echo(
            f"error: {result.rejected} records refused by MLflow (kept with MLflow's message in "
            f"{spool_dir / 'rejected.jsonl'}) and {result.quarantined} damaged (kept in "
            f"{spool_dir / 'quarantine.jsonl'}); they are not in the run",
            err=True,
        )
    if result.left:
        if result.gone:
            why = result.last_error
        else:
            why = f"MLflow did not take them within {timeout:g} s"
            if result.last_error:
                why += f" ({result.last_error})"
            why += f"; run `sarl tracking flush {spool_dir}` again"
        typer.echo(f"error: {result.left} records still waiting: {why}", err=True)
        raise typer.Exit(code=1)
    if result.rejected or result.quarantined:
        raise typer.Exit(code=3)


def _open(spool_dir: Path) -> Spool:
    from sarl.tracking.spool import Spool, SpoolError

    try:
        return Spool.open_existing(spool_dir)
    except (SpoolError, OSError) as e:
        raise fail(str(e)) from e
