"""Every command that reads a spec file refuses a hostile one in one line with exit 2.

The real ``sarl`` in a subprocess (``run_cli``): a non-UTF-8 file, a 5,000-deep list, a 1 KB
anchor bomb and a 50 MB file each printed a traceback or ran for minutes before. The generous
subprocess timeout only turns a hang into a failure; nothing here asserts a time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.sarl.cli.conftest import RunCli
from tests.sarl.spec.hostile import HEAD, deep_list, list_bomb


def write(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A hostile spec file of ``kind`` and the words its error must contain."""
    path = tmp_path / f"{kind}.yaml"
    if kind == "latin1":
        path.write_bytes(HEAD.encode() + b"metadata:\n  name: caf\xe9\n")
        return path, "not UTF-8: byte 0xe9 at byte offset 68 (line 4)"
    if kind == "deep":
        path.write_text(deep_list(5000))
        return path, "nest"
    if kind == "bomb":
        text = list_bomb()
        assert len(text) < 1100  # about 1 KB, expanding to 10**9 strings
        path.write_text(text)
        return path, "aliases expand the document past 10,000 nodes"
    with path.open("wb") as f:  # 50 MB, sparse: the CLI must not read it all
        f.write(HEAD.encode())
        f.truncate(50_000_000)
    return path, "50,000,000 bytes, over the 1,048,576-byte (1 MiB) limit for spec files"


def check_one_line(result: subprocess.CompletedProcess[str], path: Path, words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert str(path) in lines[0] and words in lines[0], result.stderr


@pytest.mark.parametrize("kind", ["latin1", "deep", "bomb", "big"])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_hostile_experiment_file(run_cli: RunCli, tmp_path: Path, command: str, kind: str) -> None:
    path, words = write(tmp_path, kind)
    extra = ["--local", "--workdir", str(tmp_path / "w")] if command == "run" else []
    check_one_line(run_cli(command, str(path), *extra, timeout=300), path, words)


@pytest.mark.parametrize(
    "command",
    [["study", "run", "--local"], ["submit"], ["reward", "score", "ground_truth", "--settings"]],
    ids=["study-run", "submit", "reward-settings"],
)
def test_every_other_reader_refuses_the_bomb(
    run_cli: RunCli, tmp_path: Path, command: list[str]
) -> None:
    """``sarl submit`` validates before it connects, so no cluster is needed to reach it."""
    path, words = write(tmp_path, "bomb")
    check_one_line(run_cli(*command, str(path), timeout=300), path, words)
