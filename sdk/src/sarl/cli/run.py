"""``sarl run``, ``sarl validate``, ``sarl presets`` and ``sarl rewards``: Experiments from the
command line. ``run --local`` trains here (see ``sarl.runner.local``); errors in the spec or in
preflight print one line and exit 2; a failure during training exits 1; Ctrl-C, SIGTERM or SIGHUP
exit 128 + the signal number; ``--resume`` of a finished run prints one line and exits 0; a run
whose tracking records MLflow refused (or found damaged) exits 3 after its summary, naming where
they are kept.
``--set KEY=VALUE`` changes the document before validation (:mod:`sarl.spec.overrides`); a Study
given to ``sarl run`` is refused naming ``sarl study run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli.options import DEFAULT_WORKDIR, SetOpt, TrackingUriOpt, WorkdirOpt, fail
from sarl.cli.where import here_or_fail
from sarl.workdir import resolve_workdir

if TYPE_CHECKING:
    from sarl.runner.result import RunResult
    from sarl.spec.experiment import Experiment

FileArg = Annotated[
    Path,
    typer.Argument(
        help="Experiment YAML (apiVersion sarl.dev/v1alpha1, kind Experiment).",
        metavar="FILE",
        show_default=False,
    ),
]
DocumentArg = Annotated[
    Path,
    typer.Argument(
        help="Experiment or Study YAML (apiVersion sarl.dev/v1alpha1).",
        metavar="FILE",
        show_default=False,
    ),
]


def _experiment(source: Path, sets: list[str] | None) -> Experiment:
    """The validated Experiment of ``source``; a Study is refused naming the command for it."""
    from sarl.spec.loader import SpecError, validate_document
    from sarl.spec.overrides import load_with_sets
    from sarl.spec.study import is_study_document

    try:
        data, label = load_with_sets(source, sets)
        if is_study_document(data):
            raise SpecError(
                f"{label}: kind='Study': a Study runs with `sarl study run {source} --local` "
                "(its arms x seeds here), or `sarl submit` on a cluster"
            )
        return validate_document(data, label)
    except SpecError as e:
        raise fail(str(e)) from e


def _again(
    experiment: Path,
    sets: list[str] | None,
    *flags: str,
    workdir: Path | None = None,
    tracking_uri: str | None = None,
) -> str:
    """The command line that runs the same document again, quoted: ``--set`` and the options
    that select the store (``--workdir``, ``--tracking-uri``) as given, so a resume finds the
    run it continues (without them it would look in another store)."""
    import shlex

    extra = [arg for item in sets or () for arg in ("--set", item)]
    if workdir is not None and workdir != DEFAULT_WORKDIR:
        extra += ["--workdir", str(workdir)]
    if tracking_uri is not None:
        extra += ["--tracking-uri", tracking_uri]
    return shlex.join(["sarl", "run", str(experiment), *flags, *extra])


def run_command(
    experiment: FileArg,
    local: Annotated[
        bool,
        typer.Option(
            "--local", help="Train here (CPU, TRL). The default when no cluster is configured."
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue from the last complete checkpoint and the same MLflow run."
        ),
    ] = False,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over",
            help="With --resume: take over a run whose owner stopped renewing its lease (stale).",
        ),
    ] = False,
    sets: SetOpt = None,
    tracking_uri: TrackingUriOpt = None,
    workdir: WorkdirOpt = DEFAULT_WORKDIR,
) -> None:
    """Run an Experiment here (CPU, TRL): with --local, or when no cluster is configured.

    On a cluster use `sarl submit FILE`; a Study runs with `sarl study run FILE --local`.
    """
    from sarl.runner.preflight import PreflightError

    exp = _experiment(experiment, sets)
    if not local:
        here_or_fail(exp.name, "sarl run", experiment)
    from sarl.runner.faults import RunFailed
    from sarl.runner.interrupt import Terminated
    from sarl.runner.local import LocalOptions, run_local
    from sarl.storage import StorageError
    from sarl.tracking.tracker import TrackingError

    opts = LocalOptions(
        workdir=resolve_workdir(workdir),
        tracking_uri=tracking_uri,
        resume=resume,
        take_over=take_over,
        tracking_uri_flag="--tracking-uri",
    )
    try:
        result = run_local(exp, opts)
    except PreflightError as e:
        raise fail(str(e)) from e
    except (StorageError, TrackingError, RunFailed) as e:
        # `sarl run --local --resume` in a fault's line is this document's command line.
        again = _again(
            experiment, sets, "--local", "--resume", workdir=workdir, tracking_uri=tracking_uri
        )
        typer.echo(f"error: {str(e).replace('sarl run --local --resume', again)}", err=True)
        raise typer.Exit(code=1) from e
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (Terminated)
        signum = e.signum if isinstance(e, Terminated) else 2  # SIGINT
        again = _again(
            experiment, sets, "--local", "--resume", workdir=workdir, tracking_uri=tracking_uri
        )
        typer.echo(
            f"{exp.name}: {e or 'interrupted'} (MLflow run closed KILLED); continue with `{again}`",
            err=True,
        )
        raise typer.Exit(code=128 + signum) from e
    if result.already_finished:
        typer.echo(
            f"{exp.name}: MLflow run {result.run_id} already finished at step {result.steps}; "
            "nothing to resume (raise spec.algorithm.max_steps or epochs to train further, e.g. "
            f"--set spec.algorithm.max_steps={result.steps * 2})"
        )
        return
    _print_summary(result)
    if result.tracking_refused:
        typer.echo(
            f"error: MLflow's record of run {result.run_id} is incomplete: "
            f"{result.tracking_refused} tracking records were refused by MLflow or damaged; "
            f"they are kept in {result.spool_dir} (rejected.jsonl, quarantine.jsonl; "
            "docs/tracking-spool.md)",
            err=True,
        )
    if result.upload_pending:
        again = _again(
            experiment, sets, "--local", "--resume", workdir=workdir, tracking_uri=tracking_uri
        )
        typer.echo(
            f"warning: training finished but the store did not take its last checkpoint; it is "
            f"kept at {result.upload_pending}: upload it with `{again}`",
            err=True,
        )
    if result.tracking_refused:
        raise typer.Exit(code=3)


def _print_summary(result: RunResult) -> None:
    """The result as notebooks show it (:meth:`RunResult._section`, :mod:`sarl.display`): the
    heading with the steps, where the MLflow run and the checkpoints are, any records still
    spooled, and the headline final metrics."""
    from rich.console import Console

    # soft_wrap: paths, URLs and the `sarl tracking flush` command stay whole lines, copyable.
    Console().print(result, soft_wrap=True)


def validate_command(experiment: DocumentArg, sets: SetOpt = None) -> None:
    """Validate an Experiment or a Study and print the resolved spec (presets applied).

    A Study prints every arm x seed Experiment it expands into.
    """
    import yaml

    from sarl.spec.loader import SpecError, validate_document, validate_study
    from sarl.spec.overrides import load_with_sets
    from sarl.spec.secrets import redact
    from sarl.spec.study import is_study_document

    try:
        data, label = load_with_sets(experiment, sets)
        if is_study_document(data):
            runs = validate_study(data, label).runs()
            docs = [redact(r.experiment.model_dump(mode="json")) for r in runs]
            typer.echo(yaml.safe_dump_all(docs, sort_keys=False))
            return
        exp = validate_document(data, label)
    except SpecError as e:
        raise fail(str(e)) from e
    # Validation refused credentials; redacting is for any rule the refusal might miss.
    typer.echo(yaml.safe_dump(redact(exp.model_dump(mode="json")), sort_keys=False))


def presets_command() -> None:
    """List the named presets: algorithm, model and what each is for."""
    from sarl.spec.presets import DESCRIPTIONS, PRESETS

    for name in sorted(PRESETS):
        algo = PRESETS[name].get("algorithm", {}).get("name", "grpo")
        model = PRESETS[name].get("model", {}).get("name", "")
        typer.echo(f"{name:22s} {algo:5s} {model:18s} {DESCRIPTIONS.get(name, '')}".rstrip())


def rewards_command() -> None:
    """List the registered rewards, with what each scores."""
    from sarl.rewards.registry import reward_names, reward_summary

    for name in reward_names():
        typer.echo(f"{name:25s} {reward_summary(name)}".rstrip())
