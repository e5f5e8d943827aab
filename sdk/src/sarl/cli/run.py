"""``sarl run``, ``sarl validate``, ``sarl presets`` and ``sarl rewards``: Experiments from the
command line. ``run --local`` trains here (see ``sarl.runner.local``); errors in the spec or in
preflight print one line and exit 2; a failure during training exits 1; Ctrl-C, SIGTERM or SIGHUP
exit 128 + the signal number; ``--resume`` of a finished run prints one line and exits 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli.options import fail

if TYPE_CHECKING:
    from sarl.runner.local import RunResult

FileArg = Annotated[Path, typer.Argument(help="Experiment YAML (apiVersion sarl.dev/v1alpha1).")]
# Shared with `sarl study run`: where local runs keep their state and log.
TrackingUriOpt = Annotated[
    str | None,
    typer.Option("--tracking-uri", help="MLflow server or store (overrides spec.tracking)."),
]
WorkdirOpt = Annotated[
    Path, typer.Option("--workdir", help="Local state: MLflow store, checkpoints, caches.")
]


def run_command(
    experiment: FileArg,
    local: Annotated[bool, typer.Option("--local", help="Train here (CPU, TRL).")] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue from the last complete checkpoint and the same MLflow run."
        ),
    ] = False,
    tracking_uri: TrackingUriOpt = None,
    workdir: WorkdirOpt = Path(".sarl"),
) -> None:
    """Run an Experiment here with --local (CPU, TRL); on a cluster use `sarl submit`."""
    from sarl.runner.preflight import PreflightError
    from sarl.spec.loader import SpecError, load_experiment

    try:
        exp = load_experiment(experiment)
    except SpecError as e:
        raise fail(str(e)) from e
    if not local:
        raise fail(
            f"sarl run trains on this machine only with --local; to run {exp.name!r} on a "
            f"cluster use `sarl submit {experiment}`"
        )
    from sarl.runner.interrupt import Terminated
    from sarl.runner.local import LocalOptions, run_local
    from sarl.storage import StorageError
    from sarl.tracking.tracker import TrackingError

    opts = LocalOptions(
        workdir=workdir,
        tracking_uri=tracking_uri,
        resume=resume,
        tracking_uri_flag="--tracking-uri",
    )
    try:
        result = run_local(exp, opts)
    except PreflightError as e:
        raise fail(str(e)) from e
    except (StorageError, TrackingError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(code=1) from e
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (Terminated)
        signum = e.signum if isinstance(e, Terminated) else 2  # SIGINT
        typer.echo(
            f"{exp.name}: {e or 'interrupted'} (MLflow run closed KILLED); continue with "
            f"`sarl run {experiment} --local --resume`",
            err=True,
        )
        raise typer.Exit(code=128 + signum) from e
    if result.already_finished:
        typer.echo(
            f"{exp.name}: MLflow run {result.run_id} already finished at step {result.steps}; "
            "nothing to resume (raise spec.algorithm.max_steps or epochs to train further)"
        )
        return
    _print_summary(exp.name, result)


def _print_summary(name: str, result: RunResult) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{name}: {result.steps} steps"
        + (f" (resumed from step {result.resumed_from})" if result.resumed_from else "")
    )
    table.add_column("metric")
    table.add_column("final", justify="right")
    wanted = (
        "reward/mean",
        "reward/structure",
        "reward/ground_truth",
        "accuracy",
        "structure/clustering",
        "structure/path_length",
        "response_length",
        "kl",
        "entropy",
    )
    for key in [*wanted, *sorted(k for k in result.final_metrics if k.startswith("eval/"))]:
        if key in result.final_metrics:
            table.add_row(key, f"{result.final_metrics[key]:.4f}")
    console = Console()
    console.print(table)
    console.print(f"MLflow run {result.run_id} at {result.run_url or result.tracking_uri}")
    console.print(f"checkpoints: {result.checkpoint_uri}")
    if result.spooled:  # MLflow was away at the end; nothing is lost, it waits on disk
        typer.echo(result.spooled_line())


def validate_command(experiment: FileArg) -> None:
    """Validate an Experiment (or Study) YAML and print the resolved spec (presets applied);
    a Study prints every arm x seed Experiment it expands into."""
    import yaml

    from sarl.spec.loader import SpecError, load_document, load_experiment, validate_study
    from sarl.spec.secrets import redact
    from sarl.spec.study import is_study_document

    try:
        data, label = load_document(experiment)
        if is_study_document(data):
            runs = validate_study(data, label).runs()
            docs = [redact(r.experiment.model_dump(mode="json")) for r in runs]
            typer.echo(yaml.safe_dump_all(docs, sort_keys=False))
            return
        exp = load_experiment(experiment)
    except SpecError as e:
        raise fail(str(e)) from e
    # Validation refused credentials; redacting is for any rule the refusal might miss.
    typer.echo(yaml.safe_dump(redact(exp.model_dump(mode="json")), sort_keys=False))


def presets_command() -> None:
    """List the named presets (paper Tables 6/7 and local CPU presets)."""
    from sarl.spec.presets import PRESETS

    for name in sorted(PRESETS):
        algo = PRESETS[name].get("algorithm", {}).get("name", "grpo")
        model = PRESETS[name].get("model", {}).get("name", "")
        typer.echo(f"{name:24s} {algo:5s} {model}")


def rewards_command() -> None:
    """List the registered rewards."""
    from sarl.rewards.registry import reward_names

    for name in reward_names():
        typer.echo(name)
