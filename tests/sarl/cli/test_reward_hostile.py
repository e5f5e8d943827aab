"""The structure reward's lines on hostile input (issue 12): one output per line, a line's problem
is that line's error, crashes are exit 3 — checked on the reproducers (by the name ``sarl reward
score structure`` and by the hidden old name ``sarl reward structure``) and as properties of
their one engine, :mod:`sarl.cli.structure_lines`."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sarl.cli import lines as cli
from sarl.cli import structure_lines
from sarl.cli.lines import is_blank
from sarl.cli.main import app
from sarl.embedding.base import normalize_rows
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.result import OUTPUT_KEYS, StructureResult
from tests.sarl.cli.conftest import SDK_SRC, _command

HUGE_INT = "1" + "0" * 4300  # 4,301 digits: past Python's int-string limit
FAR = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0.01, 0], [0, 1, 0.01], [0.01, 0, 1], [1, 0, 0.01]]


NAMES = pytest.mark.parametrize(
    "name", [("reward", "score", "structure"), ("reward", "structure")], ids=["score", "old-name"]
)


def run_bytes(stdin: bytes, name: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SDK_SRC), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [*_command(), *name],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


def rows_of(stdout: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.decode("ascii").splitlines()]


def scaled(rows: list[list[float]], factor: float) -> list[list[float]]:
    return [[x * factor for x in row] for row in rows]


@NAMES
def test_every_reproducer_is_its_own_line_error_and_the_rest_still_score(name: list[str]) -> None:
    lines = [
        b'{"step_labels": [0, 1]}',
        b'{"step_labels": [1' + b"0" * 4300 + b"]}",  # int-string limit in json.loads
        b"[" * 1000 + b"]" * 1000,  # nested 1,000 deep
        b'{"response": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"step_embeddings": [[1' + b"0" * 400 + b", 0], [0, 1]]}",  # float64 overflow
        b'{"response": "caf\xc3\xa9 \xff\xfe"}',  # invalid UTF-8
        json.dumps({"step_embeddings": FAR}).encode(),
        json.dumps({"step_embeddings": scaled(FAR, 1e200)}).encode(),  # squares overflow
        json.dumps({"step_embeddings": scaled(FAR, 5e-324)[:1] + FAR[1:]}).encode(),
        b'{"step_labels": [0,\r 1, 2]}',  # a \r between JSON tokens is whitespace
        b'{"response": "a\rb", "step_labels": [0]}',  # ... and a control character in a string
        b'{"step_labels": [0, 1, 2, 0]}',
    ]
    proc = run_bytes(b"\n".join(lines) + b"\n", name)
    assert b"Traceback" not in proc.stderr
    assert proc.returncode == cli.EXIT_INVALID_LINES
    rows = rows_of(proc.stdout)
    assert len(rows) == len(lines)
    errors = {i + 1: row["error"] for i, row in enumerate(rows) if "error" in row}
    assert set(errors) == {2, 3, 4, 5, 6, 11}
    assert "4300 digits" in errors[2]
    assert "nested too deeply" in errors[3] and "nested too deeply" in errors[4]
    assert "step_embeddings[0][0]: expected a finite number" in errors[5]
    assert errors[6] == "line 6: invalid UTF-8 at byte 21 of the line"
    assert "invalid JSON: Invalid control character" in errors[11]
    assert rows[0]["score"] == pytest.approx(0.5)
    assert rows[6]["labels"] == [0, 1, 2, 0, 1, 2, 0]
    assert rows[7] == rows[6]  # 1e200 scaled: the same directions, the same map
    assert rows[8]["labels"] == rows[6]["labels"]  # a 5e-324 row still has its direction
    assert rows[9]["num_steps"] == 3
    assert rows[11]["score"] == pytest.approx(1.0)


@NAMES
def test_a_line_never_fails_its_chunk(name: list[str]) -> None:
    """The 1e200 / 5e-324 lines used to fail every embeddings line of their 1,024-line chunk."""
    good = json.dumps({"step_embeddings": FAR}).encode()
    extreme = [json.dumps({"step_embeddings": scaled(FAR, f)}).encode() for f in (1e200, 5e-324)]
    proc = run_bytes(b"\n".join([good, *extreme, good]) + b"\n", name)
    assert proc.returncode == cli.EXIT_OK, proc.stderr
    rows = rows_of(proc.stdout)
    assert rows[1]["labels"] == rows[0]["labels"] == rows[3]["labels"]


@NAMES
def test_an_internal_error_exits_3_with_one_line(
    monkeypatch: pytest.MonkeyPatch, name: list[str]
) -> None:
    def broken(*args: object) -> None:
        raise TypeError("a bug\non two lines")

    monkeypatch.setattr(structure_lines, "score_isolated", broken)
    result = CliRunner().invoke(app, list(name), input='{"step_labels": [0, 1]}\n')
    assert result.exit_code == cli.EXIT_INTERNAL
    assert result.stderr.splitlines()[-1] == "error: internal error: TypeError: a bug on two lines"


@NAMES
def test_exit_codes_are_in_the_help(name: list[str]) -> None:
    result = CliRunner().invoke(app, [*name, "--help"])
    assert all(f"{code} = " in result.output for code in "0123")


# --- properties: any mix of lines, any chunking ------------------------------------------------


class Utf8Embedder:
    """In-process stand-in for a real embedder: like a tokenizer or JSON over HTTP it encodes the
    text as strict UTF-8 (so a lone surrogate reaching it raises)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode("utf-8")).digest()[:8], "little")
            rows.append(np.random.default_rng(seed % 7).normal(size=8))
        return normalize_rows(np.array(rows)) if rows else np.zeros((0, 8), np.float32)


def score_lines(lines: list[bytes], chunk_lines: int = cli.CHUNK_LINES) -> list[dict[str, Any]]:
    lazy = structure_lines.LazyEmbedder(Utf8Embedder)
    config = StructureRewardConfig(max_steps=64)
    stream = io.BytesIO(b"".join(lines))
    batches = structure_lines.score_lines(
        stream, config, lazy, StructureResult.to_dict, chunk_lines=chunk_lines
    )
    return [line.row for batch in batches for line in batch]


def without_number(row: dict[str, Any]) -> dict[str, Any]:
    if "error" not in row:
        return row
    return {"error": row["error"].split(": ", 1)[1]}


BIG_LINE = json.dumps({"response": "<think>" + "step\n\n" * 200_000 + "</think>"}).encode()
HOSTILE_LINES = [
    b"",
    b"   \t",
    b"\xff\xfe\xfd",
    b'{"response": "\xed\xa0\x80"}',  # an encoded surrogate: invalid UTF-8
    b'{"response": "\\ud800 lone \\udfff\\n\\nsurrogates"}',
    b"[" * 5000,
    b"{" * 5000,
    b'{"step_labels": [' + b"[" * 3000 + b"]" * 3000 + b"]}",
    b'{"step_labels": [1' + b"0" * 5000 + b"]}",
    b'{"step_labels": [' + b"1" + b"0" * 4000 + b"]}",
    b'{"step_embeddings": [[1e999, 1]]}',
    b'{"step_embeddings": [[NaN, 1]]}',
    b'{"step_embeddings": [[-Infinity]]}',
    b'{"step_embeddings": [[1' + b"0" * 400 + b"]]}",
    b'{"step_embeddings": [[1e308, 1e308, -1e308], [5e-324, 0, 0], [1e-320, 2e-320, 0]]}',
    b'{"step_labels": [0, 1]}\r',
    b'{"step_labels":\r[0, 1, 0]}',
    b'{"response": "x\ry"}',
    b'{"step_labels": ' + json.dumps(list(range(10_000))).encode() + b"}",
    b'{"response": "<think>' + b"\\\\boxed{" * 5000 + b'</think>"}',
    BIG_LINE,
]
good_lines = st.one_of(
    st.lists(st.integers(0, 4), max_size=12).map(lambda v: {"step_labels": v}),
    st.lists(
        st.lists(
            st.sampled_from([1.0, -2.5, 0.25, 1e200, -1e200, 5e-324, 1e-310, 1.7e308, 3]),
            min_size=3,
            max_size=3,
        ),
        max_size=10,
    ).map(lambda rows: {"step_embeddings": rows}),
    st.text(max_size=60).map(lambda t: {"response": t.replace("|", "\n\n")}),
).map(lambda obj: json.dumps(obj).encode())
any_line = st.one_of(good_lines, st.sampled_from(HOSTILE_LINES), st.binary(max_size=40))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(any_line, min_size=1, max_size=12), st.integers(1, 5))
def test_each_line_scores_as_it_would_alone(lines: list[bytes], chunk_lines: int) -> None:
    lines = [line.replace(b"\n", b" ") + b"\n" for line in lines]  # one input line each
    while len(lines) > 1 and is_blank(lines[-1]):
        lines.pop()  # trailing blank lines produce no output (tested elsewhere)
    if is_blank(lines[-1]):
        return
    rows = score_lines(lines, chunk_lines)
    assert len(rows) == len(lines)
    for number, (line, row) in enumerate(zip(lines, rows, strict=True), start=1):
        if "error" in row:
            assert row["line"] == number and row["error"].startswith(f"line {number}: ")
            assert "\n" not in row["error"]
        else:
            assert list(row) == list(OUTPUT_KEYS)
            assert math.isfinite(row["score"]) and 0.0 <= row["score"] <= 1.0
        if is_blank(line):
            assert row["error"] == f"line {number}: empty line (expected a JSON object)"
        else:
            assert without_number(row) == without_number(score_lines([line])[0])
