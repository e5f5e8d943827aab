"""How every sarl command's ``-h`` shows its parameters: a flag with no type column (typer 0.29
prints ``<bool>`` beside ``--local``, which reads as a value to pass) and an argument by its
placeholder alone (``FILE``, not ``FILE <path>``).

Called once by :mod:`sarl.cli.main`, which gives every command and group it registers these
classes (:func:`plain_parameters`); typer builds the click commands from them on each call.
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
