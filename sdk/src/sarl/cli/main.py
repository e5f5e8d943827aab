"""Entry point of the ``sarl`` command (``[project.scripts]``): wires the sub-commands.

Sub-commands live in their own modules (``reward.py``, ``reward_score.py``, ``maps.py``,
``demo.py``); heavy imports happen inside the commands so ``sarl --help`` stays instant. Other
installed packages add sub-commands through the ``sarl.cli`` entry-point group (e.g. ``sarl
serve`` from ``sarl-services``), so dependencies point into the sdk and the sdk never imports
them by name.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

import typer

from sarl.cli import (
    cluster,
    compare,
    data,
    demo,
    maps,
    reward,
    reward_score,
    run,
    study,
    study_run,
    tracking,
)

app = typer.Typer(
    name="sarl",
    help="Structure-aware RL for reasoning models: rewards, reasoning maps and experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
reward.app.command("score")(reward_score.score_command)
app.add_typer(reward.app, name="reward")
app.add_typer(data.app, name="data")
study.app.command("run")(study_run.run_command)
app.add_typer(study.app, name="study")
app.add_typer(tracking.app, name="tracking")
app.command("map")(maps.map_command)
app.command("demo")(demo.demo_command)
app.command("run")(run.run_command)
app.command("validate")(run.validate_command)
app.command("presets")(run.presets_command)
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
