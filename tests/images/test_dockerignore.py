"""The Docker build context: every file a Dockerfile COPYs is sent, virtual environments are not.

`make images` builds every image from the repository root. The root ``.dockerignore`` applies to
all of them (the legacy builder reads only it); BuildKit reads ``<Dockerfile>.dockerignore`` next
to a Dockerfile instead where one exists (services/*/). Both are checked with a port of Docker's
matcher, since no Docker engine runs here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.images.resolve import ROOT, dockerfiles


def read_patterns(path: Path) -> list[str]:
    """Patterns of an ignore file, cleaned as Docker does.

    Contract: moby/patternmatcher v0.6.1, ``ignorefile/ignorefile.go`` ``ReadAll``: ``#`` lines
    are comments, lines are trimmed, a leading ``!`` negates, paths are cleaned and a leading
    ``/`` dropped.
    """
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("#") or not raw.strip():
            continue
        line = raw.strip()
        invert = line.startswith("!")
        pattern = line[1:].strip() if invert else line
        pattern = re.sub(r"/+", "/", pattern).rstrip("/") or "/"
        if len(pattern) > 1 and pattern.startswith("/"):
            pattern = pattern[1:]
        out.append(("!" if invert else "") + pattern)
    return out


def _regex(pattern: str) -> re.Pattern[str]:
    """Contract: moby/patternmatcher v0.6.1 ``patternmatcher.go`` ``(*Pattern).compile``:
    ``**/`` matches any number of directories (even none), a trailing ``**`` anything, ``*`` and
    ``?`` never cross ``/``."""
    out, i = "^", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
            out += ".*" if i >= len(pattern) else "(.*/)?"
            continue
        ch = pattern[i]
        out += "[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch)
        i += 1
    return re.compile(out + "$")


def excluded(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` out of the context.

    Contract: moby/patternmatcher v0.6.1 ``patternmatcher.go`` ``MatchesOrParentMatches``: the
    patterns run in order, each matching the path or one of its parent directories; the last
    match decides (``!`` re-includes).
    """
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    matched = False
    for pattern in patterns:
        exclusion = pattern.startswith("!")
        if exclusion != matched:
            continue
        regex = _regex(pattern[1:] if exclusion else pattern)
        if any(regex.match(c) for c in candidates):
            matched = not exclusion
    return matched


def copied_sources(dockerfile: Path) -> list[str]:
    """The context paths of a Dockerfile's COPY lines (not ``--from`` stages)."""
    sources = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def tracked_files(source: str) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--", source], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return listed or [source]


def ignore_files(dockerfile: Path) -> list[Path]:
    """The ignore files that may apply: the root one always (legacy builder), the per-Dockerfile
    one where it exists (BuildKit)."""
    own = dockerfile.with_name(dockerfile.name + ".dockerignore")
    return [ROOT / ".dockerignore", *([own] if own.exists() else [])]


CASES = [
    pytest.param(d, ignore, id=f"{d.relative_to(ROOT)}|{ignore.relative_to(ROOT)}")
    for d in dockerfiles()
    for ignore in ignore_files(d)
]


@pytest.mark.parametrize(("dockerfile", "ignore"), CASES)
def test_every_copied_file_is_sent(dockerfile: Path, ignore: Path) -> None:
    patterns = read_patterns(ignore)
    sources = copied_sources(dockerfile)
    assert sources, f"{dockerfile}: no COPY line found"
    dropped = [f for s in sources for f in tracked_files(s) if excluded(f, patterns)]
    assert not dropped, f"{ignore.name} leaves out files {dockerfile.name} copies: {dropped[:5]}"


@pytest.mark.parametrize("ignore", sorted({i for _, i in (c.values for c in CASES)}))
@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".venv-verl/lib/python3.11/site-packages/torch/__init__.py",
        ".git/HEAD",
        ".sarl/runs/x.json",
        "out/demo/report.md",
        "sdk/src/sarl/__pycache__/x.cpython-311.pyc",
        "sdk/src/sarl.egg-info/PKG-INFO",
        ".mypy_cache/3.11/x.json",
    ],
)
def test_environments_and_caches_stay_out(ignore: Path, path: str) -> None:
    assert excluded(path, read_patterns(ignore)), f"{ignore.name} sends {path}"


@pytest.mark.parametrize(
    ("path", "patterns", "expected"),
    [
        ("sdk/src/sarl/x.py", ["**", "!sdk/src"], False),  # parent directory re-included
        ("sdk/src/sarl/__pycache__/a.pyc", ["**", "!sdk/src", "**/__pycache__"], True),
        (".venv/bin/python", [".venv*"], True),
        (".venv-verl/bin/python", [".venv*"], True),
        ("docs/.venv", [".venv*"], False),  # `*` does not cross `/`
        ("a/b/c.txt", ["a/**/c.txt"], True),
        ("a/c.txt", ["a/**/c.txt"], True),  # `**/` also matches no directory
    ],
)
def test_matcher_follows_docker(path: str, patterns: list[str], expected: bool) -> None:
    assert excluded(path, patterns) is expected


def test_missing_root_dockerignore_would_fail() -> None:
    """Without an ignore file (today's code before .dockerignore existed) .venv is sent."""
    assert not excluded(".venv/bin/python", [])
    assert (ROOT / ".dockerignore").is_file()
