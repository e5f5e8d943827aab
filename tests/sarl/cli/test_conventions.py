"""Conventions of the whole ``sarl`` CLI (:mod:`sarl.cli.options`): ``--version``; ``-h`` as
``--help`` everywhere; one meaning per short flag; the same placeholders for the same kind of
value; help whose line breaks fall at sentence ends; ``--workdir`` on every command that reads
the local store; ``sarl presets`` and ``sarl rewards`` with a description per line."""

from __future__ import annotations

import enum
import re
import types
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any, Union, get_args, get_origin

import pytest
import typer.main
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.rewards.registry import reward_names
from sarl.spec.presets import PRESETS
from tests.sarl.cli.conftest import RunCli

#: Placeholders by option (whatever command has it).
PLACEHOLDERS = {
    "--workdir": {"DIR"},
    "--tracking-uri": {"URI"},
    "--namespace": {"NAME"},
    "--context": {"NAME"},
    "--kubeconfig": {"FILE"},
    "--input": {"FILE"},
    "--out": {"DIR", "FILE", "PNG", "DIR|URI"},
    "--set": {"KEY=VALUE"},
    "--timeout": {"SECONDS"},
    "--interval": {"SECONDS"},
    "--embedding-url": {"URL"},
    "--endpoint-url": {"URL"},
}
#: The one meaning of each short flag.
SHORT_FLAGS = {
    "-i": "--input",
    "-o": "--out",
    "-n": "--namespace",
    "-A": "--all-namespaces",
    "-f": "--follow",
    "-e": "--experiment",
    "-j": "--jobs",
    "-s": "--settings",
    "-g": "--group-by",
    "-l": "--index",
    "-h": "--help",
}


def commands() -> Iterator[tuple[str, Any]]:
    """(``sarl ...`` path, click command) of every sarl command, groups included; plugins from
    other packages (``sarl serve``) follow their own package's conventions."""

    def walk(cmd: Any, path: str) -> Iterator[tuple[str, Any]]:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    for path, cmd in walk(typer.main.get_command(app), "sarl"):
        module = getattr(cmd.callback, "__module__", "") or ""
        if module.startswith("sarl.cli"):
            yield path, cmd


def leaf_commands() -> list[tuple[str, Any]]:
    return [(p, c) for p, c in commands() if not hasattr(c, "commands")]


def _is_choice(param: Any) -> bool:
    annotation = param.type_descriptor.annotation
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else ()
    return any(isinstance(a, type) and issubclass(a, enum.Enum) for a in (annotation, *members))


def test_version(run_cli: RunCli) -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"sarl {version('sarl')}\n"


@pytest.mark.parametrize("path", [p for p, _ in commands()])
def test_dash_h_is_help_everywhere(path: str) -> None:
    result = CliRunner().invoke(app, [*path.split()[1:], "-h"])
    assert result.exit_code == 0, result.output
    assert "Usage: sarl" in result.stdout
    assert "-h" in result.stdout and "--help" in result.stdout


def test_each_short_flag_means_one_thing() -> None:
    meanings: dict[str, set[str]] = {}
    for _, cmd in leaf_commands():
        for param in cmd.params:
            opts = [*param.opts, *getattr(param, "secondary_opts", [])]
            longs = [o for o in opts if o.startswith("--")]
            for short in (o for o in opts if re.fullmatch(r"-\w", o)):
                meanings.setdefault(short, set()).update(longs)
    assert meanings == {k: {v} for k, v in SHORT_FLAGS.items() if k in meanings}
    assert meanings["-n"] == {"--namespace"}


@pytest.mark.parametrize(("path", "cmd"), leaf_commands())
def test_values_have_uppercase_placeholders(path: str, cmd: Any) -> None:
    for param in cmd.params:
        if getattr(param, "is_flag", False) or _is_choice(param):
            continue  # flags take no value; choices show them: <kmeans|hdbscan>
        name = f"{path} {param.opts[0]}"
        assert param.metavar and re.fullmatch(r"[A-Z_|=]+", param.metavar), name
        wanted = PLACEHOLDERS.get(param.opts[0])
        assert wanted is None or param.metavar in wanted, (name, param.metavar)


@pytest.mark.parametrize(("path", "cmd"), commands())
def test_help_breaks_lines_at_sentence_ends(path: str, cmd: Any) -> None:
    """typer keeps a docstring's line breaks after its first paragraph: each must end a
    sentence (or a clause), never fall mid-sentence. The first paragraph is listed on one line."""
    paragraphs = [p.strip() for p in (cmd.help or "").split("\n\n") if p.strip()]
    for paragraph in paragraphs[1:]:
        for line in paragraph.splitlines()[:-1]:
            assert line.rstrip().endswith((".", ";", ":", "?", "!")), (path, line)
    if cmd.short_help is not None:
        assert "\n" not in cmd.short_help, path


def test_the_local_store_is_chosen_with_workdir_alike() -> None:
    readers = {"sarl run", "sarl study run", "sarl study report"}
    found = dict(commands())
    for path in readers:
        (workdir,) = [p for p in found[path].params if p.opts[0] == "--workdir"]
        # No default of its own: the commands take sarl.workdir.default_workdir(), as
        # sarl.Client.local() does (issue 40 item 5), and the help says what that is.
        assert workdir.metavar == "DIR" and workdir.default is None, path
        assert "$SARL_WORKDIR" in (workdir.help or ""), path


def test_presets_are_listed_with_a_description() -> None:
    result = CliRunner().invoke(app, ["presets"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == sorted(PRESETS)
    for line in lines:
        assert len(line.split()) > 5 and line.rstrip().endswith("."), line
    assert any(
        re.match(r"local-grpo-arithmetic +grpo +builtin:tiny-qwen +CPU: GRPO", line)
        for line in lines
    )


def test_rewards_are_listed_with_a_description() -> None:
    result = CliRunner().invoke(app, ["rewards"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == reward_names()
    for line in lines:
        assert len(line.split()) > 4, line
    assert any(line.startswith("structure ") and "SR = C/2 + 1/(1+L)" in line for line in lines)


def _bracketed(text: str) -> list[str]:
    """``[...]`` spans of a help text as the reader must see them (Rich's ``\\[`` escape off)."""
    return [m.replace("\\[", "[") for m in re.findall(r"\\?\[[^\]\n]*\]", text)]


@pytest.mark.parametrize(("path", "cmd"), commands())
def test_bracketed_help_text_is_shown(path: str, cmd: Any) -> None:
    """Rich reads ``[low, high]`` as a markup tag and drops it unless escaped (``\\[``):
    `sarl reward diagnose -h` lost its "[low, high]" line's subject (issue 40 item 6)."""
    texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
    wanted = [span for text in texts for span in _bracketed(text)]
    if not wanted:
        return
    shown = CliRunner().invoke(app, [*path.split()[1:], "-h"], env={"COLUMNS": "400"}).stdout
    for span in wanted:
        assert span in shown, (path, span)


@pytest.mark.parametrize(("path", "cmd"), commands())
def test_help_shows_no_type_beside_a_flag_or_a_placeholder(path: str, cmd: Any) -> None:
    """typer 0.29 printed ``--local <bool>`` (as if it took a value) and ``FILE <path>``
    (issue 40 item 7; ``sarl.cli.help_style``). Choices still show: ``<kmeans|hdbscan>``."""
    shown = CliRunner().invoke(app, [*path.split()[1:], "-h"], env={"COLUMNS": "400"}).stdout
    types = re.findall(r"<(?:bool|path|str|int|float|list\[[a-z]+\])>", shown)
    assert types == [], (path, types)
