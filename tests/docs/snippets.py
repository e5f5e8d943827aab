"""The fenced shell and Python blocks of the hand-written docs, and the checks each line gets.

Used by ``tests/docs/test_snippets.py``. A block is read from README.md and docs/**/*.md (not
docs/reference/, which is generated from the code). The comment on the line before a block says
how it is treated:

- ``<!-- run -->`` before a ``python`` block: the block is executed (in a fresh interpreter, in
  the repository root); every other ``python`` block is compiled.
- ``<!-- not-checked: REASON -->`` before any block: nothing is checked, the block is counted.

Shell lines are checked without running them: ``sarl ...`` against the real CLI with click's own
parser (the command path exists, every option exists, no more arguments than it takes), ``make X``
against the Makefile's targets, ``helm install|upgrade|template ... --set a.b=c`` against the
chart's ``values.schema.json``, ``kubectl apply -f PATH`` against the repository's files, ``pip
install -e 'PKG[extras]'`` against the package's extras, ``python -m MODULE`` against the
importable modules, and ``.venv/bin/TOOL`` against the environment. A shell block with a line of
any other kind must be marked ``not-checked`` (the check says which line).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import typer

# typer 0.29 carries its own copy of click (typer._click): its commands are not click's classes.
from typer._click.core import Command, Context
from typer._click.exceptions import UsageError

ROOT = Path(__file__).resolve().parents[2]
SHELL = frozenset({"bash", "sh", "shell", "console"})
PYTHON = frozenset({"python", "py", "python3"})
RUN = "<!-- run -->"
NOT_CHECKED = re.compile(r"<!--\s*not-checked:\s*(\S[^>]*?)\s*-->")
#: Shell builtins whose lines need no check (they name nothing of this repository).
BUILTINS = frozenset({"cd", "echo", "export", "source", "set", "unset", "true"})
_FENCE = re.compile(r"^(\s*)(`{3,})([\w+-]*)[^\n]*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its marker (``run``, ``not-checked``, or
    ``""``) and its text with the fence's indentation removed."""

    path: Path
    line: int
    lang: str
    marker: str
    text: str

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and the hand-written pages under docs/ (generated reference pages excluded)."""
    docs = [
        p for p in (root / "docs").rglob("*.md") if "reference" not in p.relative_to(root).parts
    ]
    return [root / "README.md", *sorted(docs)]


def blocks(path: Path) -> Iterator[Block]:
    """The fenced blocks of one markdown file, in order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence, lang = opened.group(1), opened.group(2), opened.group(3).lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = "run" if before == RUN else "not-checked" if NOT_CHECKED.fullmatch(before) else ""
        yield Block(path, i + 1, lang, marker, "\n".join(body))
        i = j + 1


def commands(text: str) -> Iterator[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments dropped, split
    at ``;``, ``&&``, ``||``, ``|`` and ``&``; each command's words. A quote left open at the end
    of a line continues on the next one, as in the shell."""
    text = re.sub(r"\\\n", " ", text)
    # A placeholder such as `<access key>` is one word (the shell would read a redirection).
    text = re.sub(r"<([^<>\n]+)>", lambda m: "<" + m.group(1).replace(" ", "_") + ">", text)
    lines = text.split("\n")
    while lines:
        line = lines.pop(0)
        while True:
            try:
                words = _words(line)
                break
            except ValueError:  # no closing quotation yet
                if not lines:
                    raise
                line += "\n" + lines.pop(0)
        yield from words


def _words(line: str) -> list[list[str]]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    found: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set(";&|"):
            found.append([])
        else:
            found[-1].append(token)
    return [words for words in found if words]


def check_shell(words: list[str]) -> str | None:
    """``None`` when the command checks out; else the problem, one line. Raises
    :class:`Unchecked` for a command of a kind nothing here can check."""
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
        words = words[1:]  # VAR=value before a command
    if not words:
        return None
    program = words[0]
    tool = program.removeprefix(".venv/bin/").removeprefix(".venv-verl/bin/")
    if tool == "sarl":
        return check_sarl(_unbracket(words[1:]))
    if program.startswith(".venv") and tool != program:
        if not (ROOT / program).exists():
            return f"{program}: not installed by make setup"
        if tool in ("python", "python3") and words[1:2] == ["-m"]:
            return check_module(words[2])
        return None
    if program == "make":
        return check_make(words[1:])
    if program == "helm":
        return check_helm(words[1:])
    if program == "kubectl" and "apply" in words and "-f" in words:
        return check_kubectl_apply(words)
    if program == "pip" and words[1:2] == ["install"] and len(words) > 2:
        local = [w for w in words[2:] if w != "-e"]
        if words[2] == "-e" or local[0].startswith(("./", "sdk", "services", "operators", "jobs")):
            return check_extras(local[0])
    if program in ("python", "python3") and words[1:2] == ["-m"]:
        return check_module(words[2])
    if program in BUILTINS:
        return None
    raise Unchecked(" ".join(words))


class Unchecked(Exception):
    """A shell command of a kind the checks do not cover (the block must be marked)."""


def _unbracket(words: list[str]) -> list[str]:
    """Drop the brackets of optional parts written as ``[-n NS]`` or ``[--wait]``."""
    out = []
    for word in words:
        if word.startswith("[") and "]" not in word[1:-1]:
            word = word[1:]
        if word.endswith("]") and "[" not in word:
            word = word[:-1]
        if word:
            out.append(word)
    return out


@cache
def cli() -> Command:
    from sarl.cli.main import app

    return typer.main.get_command(app)


def check_sarl(args: list[str]) -> str | None:
    """Parse ``sarl ARGS`` with click's parser: every subcommand and option must exist."""
    command, ctx, path = cli(), None, ["sarl"]
    while True:
        settings = command.context_settings or {}
        ctx = Context(command, info_name=path[-1], parent=ctx, **settings)
        try:
            _, rest, _ = command.make_parser(ctx).parse_args(list(args))
        except UsageError as e:
            return f"{' '.join(path)}: {e.format_message()}"
        get_command = getattr(command, "get_command", None)  # a group of commands
        if get_command is None:
            # The parser fills the command's arguments; what is left over has no place.
            return f"{' '.join(path)}: unexpected extra argument(s) {rest}" if rest else None
        if not rest:
            return None  # `sarl --version`, `sarl -h`
        sub = get_command(ctx, rest[0])
        if sub is None:
            return f"{' '.join(path)}: no command {rest[0]!r}"
        path.append(rest[0])
        # The group's own options were consumed; the subcommand parses what follows its name.
        args = rest[1:]
        command = sub


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return frozenset(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))


def check_make(args: list[str]) -> str | None:
    targets = [a for a in args if not a.startswith("-") and "=" not in a]
    missing = [t for t in targets if t not in make_targets()]
    return f"make: no target {', '.join(missing)} in the Makefile" if missing else None


def check_helm(args: list[str]) -> str | None:
    """``helm install|upgrade|template NAME CHART --set k=v``: every key in the chart's schema."""
    positional = [a for i, a in enumerate(args) if not a.startswith("-") and not _is_value(args, i)]
    if len(positional) < 3 or positional[0] not in ("install", "upgrade", "template"):
        return None if positional[:1] in (["status"], ["uninstall"]) else f"helm: {args}"
    chart = ROOT / positional[2]
    if not (chart / "Chart.yaml").exists():
        return f"helm: no chart at {positional[2]}"
    schema = json.loads((chart / "values.schema.json").read_text(encoding="utf-8"))
    for i, arg in enumerate(args[:-1]):
        if arg == "--set":
            for key in _set_keys(args[i + 1]):
                if not _in_schema(schema, key.split(".")):
                    return f"helm: {positional[2]} has no value {key} (values.schema.json)"
    return None


def _is_value(args: list[str], i: int) -> bool:
    """Whether ``args[i]`` is the value of the option before it."""
    return i > 0 and args[i - 1] in ("--set", "-n", "--namespace", "-f", "--values", "--version")


def _set_keys(flag: str) -> list[str]:
    """The keys of one ``--set`` flag (``a.b=v,c=w``; ``a={x,y}`` is one key)."""
    if "={" in flag:
        return [flag.partition("=")[0]]
    return [pair.partition("=")[0] for pair in flag.split(",")]


def _in_schema(schema: dict[str, object], parts: list[str]) -> bool:
    for part in parts:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return schema.get("additionalProperties") not in (False, None) or "type" not in schema
        if part not in properties:
            extra = schema.get("additionalProperties")
            if not isinstance(extra, dict):
                return False
            schema = extra
            continue
        schema = properties[part]
    return True


def check_kubectl_apply(words: list[str]) -> str | None:
    path = words[words.index("-f") + 1]
    if path == "-" or "://" in path or (ROOT / path).exists():  # -: the manifest from stdin
        return None
    return f"kubectl apply -f {path}: no such file in the repository"


def check_extras(spec: str) -> str | None:
    """``pip install [-e] 'sdk[a,b]'`` of a package of this repository: the package exists and
    declares every extra."""
    match = re.fullmatch(r"([\w./-]+)(?:\[([\w,-]+)\])?", spec)
    if not match or not (ROOT / match.group(1) / "pyproject.toml").exists():
        return f"pip install -e {spec}: no package there"
    project = tomllib.loads((ROOT / match.group(1) / "pyproject.toml").read_text("utf-8"))
    declared = set(project["project"].get("optional-dependencies", {}))
    missing = [e for e in (match.group(2) or "").split(",") if e and e not in declared]
    return f"pip install -e {spec}: no extra {', '.join(missing)}" if missing else None


def check_module(name: str) -> str | None:
    try:
        found = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        found = None
    return None if found is not None else f"python -m {name}: no such module"
