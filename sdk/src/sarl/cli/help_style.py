"""How sarl commands print: every ``-h`` shows its parameters a flag with no type column (typer 0.29
prints ``<bool>`` beside ``--local``, which reads as a value to pass) and an argument by its
placeholder alone (``FILE``, not ``FILE <path>``); output that is not a terminal is not
wrapped at 80 columns (:func:`console`).

:func:`plain_parameters` is called once by :mod:`sarl.cli.main`, which gives every command and
group it registers these classes; typer builds the click commands from them on each call.
:func:`console` is called by the commands that print tables and status lines.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

# Parameters and contexts are typed Any: typer 0.29 vendors click (typer._click, private).


def _no_type(ctx: Any) -> str | None:
    return None


def _plain(params: list[Any]) -> list[Any]:
    """``params`` with the type column of flags and of named arguments turned off."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""  # typer shows a metavar as is, and "" as nothing
        elif isinstance(param, TyperArgument) and param.metavar:
            # typer's argument row shows the placeholder and then its type; the type says less.
            param.display_type_rich = _no_type  # type: ignore[method-assign]
    return params


class Command(TyperCommand):
    """A command whose help shows flags and named arguments without a type."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


class Group(TyperGroup):
    """A group whose help shows its flags (``--help``, ``--version``) without a type."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


def plain_parameters(target: typer.Typer, info: Any = None) -> None:
    """Give ``target``, its commands and its groups (recursively) :class:`Command` and
    :class:`Group`, where they name no class of their own (typer's defaults)."""
    holder = info if info is not None else target.info
    # typer fills in its own classes (or a DefaultPlaceholder) where none was given.
    if not isinstance(holder.cls, type) or holder.cls is TyperGroup:
        holder.cls = Group
    for command in target.registered_commands:
        if command.cls in (None, TyperCommand):
            command.cls = Command
    for group in target.registered_groups:
        if group.typer_instance is not None:
            plain_parameters(group.typer_instance, group)


#: Columns of output that is not a terminal (a pipe, a file, a notebook's captured stream): Rich
#: would wrap it at 80, splitting paths, URLs and table rows a script or `grep` reads.
PIPE_WIDTH = 240


def console(*, stderr: bool = False, soft_wrap: bool = False) -> Any:
    """A Rich ``Console`` for command output: the terminal's width on a terminal, else
    :data:`PIPE_WIDTH` (``COLUMNS``, when set, wins as Rich's own rule)."""
    import os

    from rich.console import Console

    probe = Console(stderr=stderr)
    if probe.is_terminal or os.environ.get("COLUMNS"):
        return Console(stderr=stderr, soft_wrap=soft_wrap)
    return Console(stderr=stderr, soft_wrap=soft_wrap, width=PIPE_WIDTH)
