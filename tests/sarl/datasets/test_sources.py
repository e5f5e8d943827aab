"""Readers of the public formats: columns found, rows dropped and counted, bad files named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sarl.datasets.sources import get_source, read_source
from sarl.datasets.tables import DatasetError
from tests.sarl.datasets.fixtures import (
    AIME_COLUMNS,
    AIME_ROWS,
    MATH500_ROWS,
    write_csv,
    write_json,
    write_jsonl,
    write_parquet,
)


def test_aime_csv_reads_question_answer_and_extra(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "AIME_Dataset_1983_2024.csv", AIME_COLUMNS, AIME_ROWS)
    result = read_source(get_source("aime"), path)
    assert result.read == 3
    assert result.dropped == {"empty answer": 1}
    first, second = result.records
    assert first.question.startswith("Let $x$") and first.answer == "60"
    assert second.extra == {
        "id": "2024-II-15",
        "year": "2024",
        "problem_number": "15",
        "part": "II",
    }


Writer = Callable[[Path, list[dict[str, Any]]], Path]


@pytest.mark.parametrize(
    ("source", "suffix", "writer", "question_column"),
    [
        ("math500", "jsonl", write_jsonl, "problem"),
        ("aime25", "json", write_json, "question"),
        ("amc23", "parquet", write_parquet, "question"),
        ("minerva", "jsonl", write_jsonl, "problem"),
    ],
)
def test_benchmark_formats(
    tmp_path: Path, source: str, suffix: str, writer: Writer, question_column: str
) -> None:
    rows = [{question_column: r["problem"], "answer": r["answer"]} for r in MATH500_ROWS]
    result = read_source(get_source(source), writer(tmp_path / f"test.{suffix}", rows))
    assert [(r.question, r.answer) for r in result.records] == [
        (r["problem"], r["answer"]) for r in MATH500_ROWS
    ]
    assert result.read == 3 and not result.dropped


def test_math500_extra_fields_become_strings(tmp_path: Path) -> None:
    result = read_source(get_source("math500"), write_jsonl(tmp_path / "t.jsonl", MATH500_ROWS))
    assert result.records[0].extra == {
        "subject": "Prealgebra", "level": "1", "unique_id": "test/prealgebra/1.json",
    }  # fmt: skip


def test_integral_float_answers_read_as_integers(tmp_path: Path) -> None:
    rows = [{"problem": "p", "answer": 19.0}, {"problem": "q", "answer": float("nan")}]
    result = read_source(get_source("aime25"), write_parquet(tmp_path / "t.parquet", rows))
    assert [r.answer for r in result.records] == ["19"]
    assert result.dropped == {"empty answer": 1}


def test_missing_column_names_file_column_and_columns_found(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "amc.jsonl", [{"prompt": "p", "answer": "1"}])
    with pytest.raises(DatasetError) as err:
        read_source(get_source("amc23"), path)
    message = str(err.value)
    assert str(path) in message and "'question' or 'problem'" in message
    assert "['prompt', 'answer']" in message


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("empty.jsonl", "\n\n", "no rows"),
        ("empty.csv", "Question,Answer\n", "no rows"),
        ("bad.jsonl", '{"problem": 1}\n{oops\n', "bad.jsonl:2: invalid JSON"),
        ("list.json", '{"problem": "p"}', "expected a JSON array"),
        ("data.txt", "hello", "unsupported file type '.txt'"),
        ("broken.parquet", "not parquet", "not a readable Parquet file"),
    ],
)
def test_unreadable_files_are_named(tmp_path: Path, name: str, content: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=expected) as err:
        read_source(get_source("aime"), path)
    assert str(tmp_path) in str(err.value)


def test_missing_file_and_unknown_source(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such file"):
        read_source(get_source("aime"), tmp_path / "absent.csv")
    with pytest.raises(DatasetError, match=r"unknown dataset 'gsm8k'; known: \['aime'"):
        get_source("gsm8k")
