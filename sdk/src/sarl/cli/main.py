"""Entry point of the ``sarl`` command (``[project.scripts]``): wires the sub-commands.

Sub-commands live in their own modules (``reward.py``, ``reward_score.py``,
``reward_diagnose.py``, ``maps.py``,
``demo.py``); heavy imports happen inside the commands so ``sarl --help`` stays instant. Other
installed packages add sub-commands through the ``sarl.cli`` entry-point group (e.g. ``sarl
serve`` from ``sarl-services``), so dependencies point into the sdk and the sdk never imports
them by name. ``-h`` is ``--help`` for every command (click passes the root's help option names
down to each sub-command and group); ``sarl --version`` prints the installed version.
"""

from __future__ import annotations

import inspect
import sys
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Annotated

import typer

from sarl.cli import (
    cluster,
    compare,
    data,
    demo,
    maps,
    models,
    plan,
    render,
    reward,
    reward_diagnose,
    reward_score,
    run,
    study,
    study_run,
    tenant,
    tracking,
)
from sarl.cli.help_style import plain_parameters

app = typer.Typer(
    name="sarl",
    help="Structure-aware RL for reasoning models: rewards, reasoning maps and experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    try:
        installed = version("sarl")
    except PackageNotFoundError:  # run from a source tree that was never installed
        installed = "unknown (not installed)"
    typer.echo(f"sarl {installed}")
    raise typer.Exit()


@app.callback()
def _sarl(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,  # before the sub-command is required
            help="Print the sarl version and exit.",
        ),
    ] = False,
) -> None:
    """Structure-aware RL for reasoning models: rewards, reasoning maps and experiments."""


reward.app.command("score")(reward_score.score_command)
reward.app.command("diagnose")(reward_diagnose.diagnose_command)
app.add_typer(reward.app, name="reward")
app.add_typer(data.app, name="data")
app.add_typer(models.app, name="models")
study.app.command("run")(study_run.run_command)
app.add_typer(study.app, name="study")
app.add_typer(tracking.app, name="tracking")
app.add_typer(tenant.app, name="tenant")
app.command("map")(maps.map_command)
app.command("demo-traces")(demo.demo_command)
app.command("demo", hidden=True)(demo.demo_alias)  # the old name, until it is removed
app.command("run")(run.run_command)
app.command("validate")(run.validate_command)
app.command("presets")(run.presets_command)
app.command("plan")(plan.plan_command)
app.command("render")(render.render_command)
app.command("rewards")(run.rewards_command)
app.command("compare")(compare.compare_command)
app.command("submit")(cluster.submit_command)
app.command("status")(cluster.status_command)
app.command("logs")(cluster.logs_command)
app.command("wait")(cluster.wait_command)
app.command("delete")(cluster.delete_command)


def add_plugins(target: typer.Typer) -> None:
    """Add each ``sarl.cli`` entry point (a typer app) to ``target`` under the entry point's name.

    A plugin that fails to load costs one warning line on stderr, never the whole CLI.
    """
    for ep in entry_points(group="sarl.cli"):
        try:
            plugin = ep.load()
            if not isinstance(plugin, typer.Typer):
                raise TypeError(f"{ep.value} is a {type(plugin).__name__}, not a typer.Typer")
            target.add_typer(plugin, name=ep.name)
        except Exception as e:  # any plugin bug; the rest of the CLI must keep working
            print(f"warning: sarl CLI plugin {ep.name!r} not loaded: {e}", file=sys.stderr)


add_plugins(app)


def one_line_summaries(target: typer.Typer) -> None:
    """Give every command of ``target`` (and of its groups) the first paragraph of its
    docstring, on one line, as the summary the command lists show.

    typer's rich help keeps a docstring's line breaks in those lists, so a summary wrapped in the
    source at 100 columns would break mid-sentence there; on the command's own page typer joins
    the first paragraph itself."""
    for info in target.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    for group in target.registered_groups:
        if group.typer_instance is not None:
            one_line_summaries(group.typer_instance)


one_line_summaries(app)
plain_parameters(app)  # flags without "<bool>", arguments without "<path>" (help_style)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
