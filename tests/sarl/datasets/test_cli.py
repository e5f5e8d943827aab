"""``sarl data prepare``: the report line on success, exit 2 and one ``error:`` line otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sarl.cli.main import app
from tests.sarl.datasets.fixtures import MATH500_ROWS, write_jsonl

SDK_SRC = Path(__file__).resolve().parents[3] / "sdk" / "src"


def test_real_command_writes_and_reports(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "math500.jsonl", MATH500_ROWS)
    out = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "sarl.cli.main", "data", "prepare", "math500", "--input",
         str(path), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(SDK_SRC)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"math500: read 3, dropped 0 (none), wrote 3 -> {out}/benchmarks/math500.parquet"
    )
    assert (out / "benchmarks" / "math500.parquet").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gsm8k"], "error: SOURCE: unknown dataset 'gsm8k'"),
        (
            ["amc23"],
            "missing the question column ('question' or 'problem'); columns found: ['prob'",
        ),
        (["openrubrics"], "error: "),  # no instruction column
        (["math500", "--split", "dev"], "error: --split: expected train or benchmark, got 'dev'"),
        (["math500", "--tokenizer", "/nonexistent-tok"], "error: --tokenizer: cannot load"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"prob": "p", "answer": "1"}])
    if args[0] == "math500":
        path = write_jsonl(tmp_path / "in.jsonl", MATH500_ROWS)
    result = CliRunner().invoke(
        app, ["data", "prepare", *args, "--input", str(path), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not (tmp_path / "o").exists()
