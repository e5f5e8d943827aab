"""reference/cli.md: every ``sarl`` command, its help, and every option and argument.

Read from the click command typer builds from ``sarl.cli.main.app`` (plugins included, e.g.
``sarl serve`` from sarl-services), so the page says what ``sarl <command> --help`` says. A
command, option or argument without help text is listed by :func:`cli_page` as missing.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import typer

from tools.refdocs.markdown import code, literal, page, prose, table

# typer 0.29 builds its commands on a click it vendors (typer._click), whose parameters differ
# from click's (no `type`, no `is_flag`): read them through what typer's own help uses, the
# parameter's `type_descriptor` and `display_type(ctx)` (typer/core.py, _TyperParameter).
Command = Any
Param = Any


def _commands(command: Command, path: str) -> Iterator[tuple[str, Command]]:
    """``(full name, command)`` for ``command`` and everything under it, sorted by name."""
    yield path, command
    for name in sorted(getattr(command, "commands", None) or {}):
        if not getattr(command.commands[name], "hidden", False):  # an old name kept as alias
            yield from _commands(command.commands[name], f"{path} {name}")


def _is_flag(param: Param) -> bool:
    return param.param_type_name == "option" and param.type_descriptor.annotation is bool


def _type(param: Param, ctx: Any) -> str:
    if _is_flag(param):
        return "flag"
    shown: str = param.display_type(ctx)
    return shown.removeprefix("<").removesuffix(">").replace("|", " | ")


def _default(param: Param) -> str:
    default = param.default
    if default is None or callable(default) or param.required:
        return ""
    if _is_flag(param) and param.secondary_opts:
        names = param.opts if default else param.secondary_opts
        return code(names[0])
    if isinstance(default, tuple | list) and not default:
        return ""
    value = getattr(default, "value", default)  # an Enum default as its value
    return literal(value)


def _names(param: Param) -> str:
    if param.param_type_name == "argument":
        return code(str(param.metavar or param.name or "").upper())
    return ", ".join(code(n) for n in [*param.opts, *param.secondary_opts])


def _help(param: Param) -> str:
    return inspect.cleandoc(getattr(param, "help", None) or "")


def _section(name: str, command: Command, ctx: Any, missing: list[str]) -> str:
    text = inspect.cleandoc(command.help or "")
    if not text:
        missing.append(f"cli: {name}")
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if not _help(param):
            missing.append(f"cli: {name} {param.opts[0] if param.opts else param.name}")
        required = "required" if param.required else ""
        rows.append((_names(param), _type(param, ctx), _default(param), required, _help(param)))
    parts = [f"## `{name}`", prose(text)]
    if rows:
        parts.append(table(("Option", "Type", "Default", "Required", "Description"), rows))
    return "\n\n".join(p for p in parts if p)


def app_reference(app: typer.Typer, prog: str) -> tuple[list[str], list[str]]:
    """One section per command of ``app`` (named ``prog ...``) and the items without help."""
    root = typer.main.get_command(app)
    ctx = root.make_context(prog, [], resilient_parsing=True)
    missing: list[str] = []
    sections = [_section(name, cmd, ctx, missing) for name, cmd in _commands(root, prog)]
    return sections, missing


def cli_page() -> tuple[str, list[str]]:
    """The page and the commands/options without help text."""
    from sarl.cli.main import app

    sections, missing = app_reference(app, "sarl")
    intro = (
        "Every command of the `sarl` CLI with its options, as `sarl <command> --help` prints "
        "them. `-h` is `--help` everywhere. Commands added by installed plugins (`sarl serve` "
        "from the services package) are included."
    )
    return page("CLI reference", intro, sections), missing
