"""Read a local table file (CSV, JSON, JSON Lines, Parquet) into rows, and find its columns.

Called by the source readers of :mod:`sarl.datasets.sources`. Every error is a
:class:`DatasetError` whose one-line message names the file (and the line for JSON Lines), so
``sarl data prepare`` can print it and exit 2. CSV and JSON use the standard library; Parquet
needs pyarrow (imported here, on use).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SUFFIXES = (".csv", ".json", ".jsonl", ".ndjson", ".parquet", ".pq")


class DatasetError(ValueError):
    """Bad input data; the message is one line naming the file, the field and the value."""


def read_table(path: Path) -> list[dict[str, Any]]:
    """All rows of ``path`` as dicts keyed by column name (file type from the suffix)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows = _read_csv(path)
    elif suffix == ".json":
        rows = _read_json(path)
    elif suffix in (".jsonl", ".ndjson"):
        rows = _read_jsonl(path)
    elif suffix in (".parquet", ".pq"):
        rows = _read_parquet(path)
    else:
        raise DatasetError(f"{path}: unsupported file type {suffix!r}; use one of {SUFFIXES}")
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return rows


def _read_csv(path: Path) -> list[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:  # -sig: Excel's BOM
            return [dict(row) for row in csv.DictReader(f)]
    except (UnicodeDecodeError, csv.Error) as e:
        raise DatasetError(f"{path}: not a readable UTF-8 CSV file: {e}") from e


def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{path}: invalid JSON: {e}") from e
    if not isinstance(doc, list):
        raise DatasetError(f"{path}: expected a JSON array of objects, got {type(doc).__name__}")
    for i, row in enumerate(doc):
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: item {i} is a {type(row).__name__}, not an object")
    return doc


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}:{lineno}: invalid JSON: {e.msg}") from e
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected an object, got {type(row).__name__}")
            rows.append(row)
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as e:
        raise DatasetError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from e
    try:
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow raises several unrelated types for a corrupt file
        raise DatasetError(f"{path}: not a readable Parquet file: {e}") from e
    return rows


def find_column(
    path: Path, rows: Sequence[dict[str, Any]], candidates: Sequence[str], role: str
) -> str:
    """The first of ``candidates`` that the file has; DatasetError listing the columns found."""
    columns = list(rows[0])
    for name in candidates:
        if name in columns:
            return name
    wanted = " or ".join(repr(c) for c in candidates)
    raise DatasetError(f"{path}: missing the {role} column ({wanted}); columns found: {columns}")


def cell_text(value: Any) -> str:
    """A cell as stripped text: None/NaN -> ``""``; an integral float (CSV/pandas turn integer
    answers with gaps into floats) -> its integer (``19.0`` -> ``"19"``)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if value.is_integer():
            return str(int(value))
    return str(value).strip()
