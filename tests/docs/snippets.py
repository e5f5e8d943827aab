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

Every ``yaml`` block must parse (``yaml.safe_load_all``; the error names page and line, even in
a ``not-checked`` block, whose marker waives only what follows). Each document of the block is
then told apart by its marker or its keys (:func:`yaml_kind`) and checked as a reader would use it:

- ``apiVersion: sarl.dev/...``: a whole Experiment or Study, validated as ``sarl validate``
  validates it (:func:`sarl.spec.loader.validate_document` / ``validate_study(...).runs()``,
  local, no cluster); the problem is the loader's one line.
- keys of an Experiment's spec (``reward:``, ``serving:``, ...), bare or under ``spec:``: a spec
  fragment, merged over the minimal valid Experiment (:data:`FRAGMENT_BASE`, preset
  ``local-grpo-arithmetic``: the fragment's own ``preset`` wins) and validated the same way; keys
  of a Study's spec (``base:``, ``arms:``, ...) likewise over :data:`STUDY_BASE`.
- ``<!-- values: CHART -->`` before the block: a Helm values fragment of ``charts/CHART``,
  merged over the chart's values.yaml (as Helm merges ``-f``: mappings merge, lists replace) and
  checked against its ``values.schema.json`` with jsonschema.
- ``apiVersion`` of any other group: a Kubernetes manifest, parsed only.

A block of none of these kinds (a fragment of another program's config) must be marked
``not-checked`` with the reason. A spec that names a reader's own reward module names the worked
example's (``examples/custom_reward``): :data:`READER_PACKAGES` is what the test puts on
``sys.path``, as ``pip install ./examples/custom_reward`` would.
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
from typing import Any, Final

import typer
import yaml

# typer 0.29 carries its own copy of click (typer._click): its commands are not click's classes.
from typer._click.core import Command, Context
from typer._click.exceptions import UsageError

ROOT = Path(__file__).resolve().parents[2]
SHELL = frozenset({"bash", "sh", "shell", "console"})
PYTHON = frozenset({"python", "py", "python3"})
YAML = frozenset({"yaml", "yml"})
RUN = "<!-- run -->"
NOT_CHECKED = re.compile(r"<!--\s*not-checked:\s*(\S[^>]*?)\s*-->")
VALUES = re.compile(r"<!--\s*values:\s*([\w-]+)\s*-->")
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


#: The packages' own READMEs, read by whoever installs one part (the charts, the services, the
#: operator): their blocks are checked as the site's are.
PACKAGE_READMES: Final = ("charts", "jobs", "operators", "sdk", "services")


def pages(root: Path = ROOT) -> list[Path]:
    """README.md, the hand-written pages under docs/ (generated reference pages excluded) and
    the packages' READMEs (:data:`PACKAGE_READMES`)."""
    docs = [
        p for p in (root / "docs").rglob("*.md") if "reference" not in p.relative_to(root).parts
    ]
    packages = [root / d / "README.md" for d in PACKAGE_READMES]
    return [root / "README.md", *sorted(docs), *(p for p in packages if p.exists())]


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
        marker = _marker(before)
        yield Block(path, i + 1, lang, marker, "\n".join(body))
        i = j + 1


def _marker(line: str) -> str:
    """``run``, ``not-checked``, ``values:CHART`` or ``""`` for the line before a block."""
    values = VALUES.fullmatch(line)
    if values:
        return f"values:{values.group(1)}"
    return "run" if line == RUN else "not-checked" if NOT_CHECKED.fullmatch(line) else ""


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


# YAML blocks (see the module docstring for how a block's kind is told).

#: The minimal valid Experiment a spec fragment is merged over.
FRAGMENT_BASE: dict[str, Any] = {
    "apiVersion": "sarl.dev/v1alpha1",
    "kind": "Experiment",
    "metadata": {"name": "docs-fragment"},
    "spec": {"preset": "local-grpo-arithmetic"},
}
#: The minimal valid Study a Study spec fragment is merged over.
STUDY_BASE: dict[str, Any] = {
    **FRAGMENT_BASE,
    "kind": "Study",
    "spec": {"base": {"preset": "local-grpo-arithmetic"}, "arms": [{"name": "docs-arm"}]},
}
#: Packages a page's spec names as the reader's own (installed by the reader).
READER_PACKAGES = (ROOT / "examples" / "custom_reward" / "src",)


def yaml_documents(block: Block) -> tuple[list[Any], str | None]:
    """The block's YAML documents, or ``[]`` and the parse error as ``page:line: message``."""
    try:
        return list(yaml.safe_load_all(block.text)), None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = block.line + 1 + (mark.line if mark is not None else 0)  # +1: the fence line
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        return [], f"{_page(block)}:{line}: YAML does not parse: {problem}"


def _page(block: Block) -> str:
    return block.where.rpartition(":")[0]


@cache
def _spec_fields() -> tuple[frozenset[str], frozenset[str]]:
    from sarl.spec.experiment import ExperimentSpec
    from sarl.spec.study import StudySpec

    return frozenset(ExperimentSpec.model_fields), frozenset(StudySpec.model_fields)


def yaml_kind(doc: Any, marker: str = "") -> str:
    """``document``, ``manifest``, ``spec``, ``study``, ``values:CHART``, or ``""`` (unknown)."""
    if marker.startswith("values:"):
        return marker
    if not isinstance(doc, dict) or not doc:
        return ""
    if "apiVersion" in doc:
        return "document" if str(doc["apiVersion"]).startswith("sarl.dev/") else "manifest"
    wrapped = set(doc) == {"spec"} and isinstance(doc["spec"], dict)
    keys = set(doc["spec"] if wrapped else doc)
    experiment, study = _spec_fields()
    if keys & study:
        return "study"
    # Under `spec:` any key is the spec's (a typo gets the loader's "did you mean").
    return "spec" if wrapped or keys & experiment else ""


def check_yaml(block: Block) -> list[str]:
    """The problems of one YAML block, each one line starting ``page:line:``."""
    docs, problem = yaml_documents(block)
    if problem or block.marker == "not-checked":
        return [problem] if problem else []
    problems = [check_yaml_document(doc, yaml_kind(doc, block.marker)) for doc in docs]
    return [f"{block.where}: {p}" for p in problems if p]


def check_yaml_document(doc: Any, kind: str) -> str | None:
    """``None`` when the document of that :func:`yaml_kind` checks out; else the problem."""
    if kind == "manifest":
        return None  # parsed; no cluster's schemas here
    if kind == "document":
        return validate_sarl(doc)
    if kind in ("spec", "study"):
        fragment = doc["spec"] if set(doc) == {"spec"} else doc
        base = STUDY_BASE if kind == "study" else FRAGMENT_BASE
        return validate_sarl({**base, "spec": deep_merge(base["spec"], fragment)})
    if kind.startswith("values:"):
        return check_values(kind.removeprefix("values:"), doc)
    return (
        "cannot tell what this YAML is (not a sarl document, spec fragment or manifest): mark "
        "it <!-- values: CHART --> or <!-- not-checked: REASON --> on the line before it"
    )


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base`` as presets, Study arms and Helm's ``-f`` merge: mappings
    merge, anything else (a list) replaces (:func:`sarl.spec.presets.deep_merge`)."""
    from sarl.spec.presets import deep_merge as merge

    return merge(base, override)


def validate_sarl(doc: dict[str, Any]) -> str | None:
    """Validate as ``sarl validate`` does (sarl/cli/run.py ``validate_command``): the
    loader's one-line message, or ``None``."""
    from sarl.spec.loader import SpecError, validate_document, validate_study
    from sarl.spec.study import is_study_document

    try:
        if is_study_document(doc):
            validate_study(doc).runs()
        else:
            validate_document(doc)
    except SpecError as e:
        return str(e)
    return None


def check_values(chart: str, values: Any) -> str | None:
    """A values fragment over ``charts/CHART/values.yaml``, against its values.schema.json."""
    import jsonschema

    folder = ROOT / "charts" / chart
    if not (folder / "values.schema.json").exists():
        return f"<!-- values: {chart} -->: no chart charts/{chart} with a values.schema.json"
    if not isinstance(values, dict):
        return f"charts/{chart} values: expected a mapping, got {type(values).__name__}"
    defaults = yaml.safe_load((folder / "values.yaml").read_text(encoding="utf-8"))
    schema = json.loads((folder / "values.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(deep_merge(defaults, values)))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"charts/{chart} values {where}: {error.message} (values.schema.json)"
