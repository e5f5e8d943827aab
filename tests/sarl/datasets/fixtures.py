"""Small files in the public datasets' formats, S3 helpers and a real local tokenizer.

Shared by the dataset tests and the evaluation job's tests (``tests/jobs/test_evaluate.py``).
The column names are the public ones: the Kaggle AIME 1983-2024 CSV, MATH-500, AIME 2025,
AMC23, Minerva Math and OpenRubrics/OpenRubric-v2 (``instruction, response_a, response_b,
winner, rubric, source``).
"""

from __future__ import annotations

import csv
import json
import random
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ACCESS_KEY = "sarl-test-key"
SECRET_KEY = "sarl-test-secret"

AIME_COLUMNS = ["ID", "Year", "Problem Number", "Question", "Answer", "Part"]
AIME_ROWS = [
    ["1983-1", "1983", "1", "Let $x$, $y$ and $z$ all exceed $1$ ... Find $\\log_z w$.", "60", ""],
    ["2024-II-15", "2024", "15", "Find the number of rectangles ...", "315", "II"],
    ["1984-3", "1984", "3", "A point $P$ is chosen ...", "", ""],  # no answer: dropped
]
MATH500_ROWS = [
    {
        "problem": "What is $\\frac{1}{2} + \\frac{1}{4}$?",
        "solution": "... $\\boxed{\\frac{3}{4}}$",
        "answer": "\\frac{3}{4}",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/1.json",
    },
    {
        "problem": "Compute $2 \\cdot 3$.",
        "solution": "$\\boxed{6}$",
        "answer": "6",
        "subject": "Prealgebra",
        "level": 2,
        "unique_id": "test/prealgebra/2.json",
    },
    {
        "problem": "Half of one?",
        "solution": "$\\boxed{0.5}$",
        "answer": "\\frac{1}{2}",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/3.json",
    },
]


def write_csv(path: Path, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_json(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(list(rows)), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    import pandas as pd

    pd.DataFrame(list(rows)).to_parquet(path)
    return path


def tokenizer_dir(path: Path) -> Path:
    """A real byte-level BPE tokenizer (the tiny policy's recipe) saved as a HF directory.

    Its vocabulary holds the word ``x``, so ``"x" + " x" * (n - 1)`` is exactly n tokens.
    """
    from sarl.runner.tiny import train_tokenizer

    rng = random.Random(0)
    words = ["x", "alpha", "beta", "gamma", "answer", "prompt", "the", "of"]
    texts = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(200)]
    train_tokenizer(texts, 320).save_pretrained(path)
    return path


def words(n: int) -> str:
    """Text of exactly ``n`` tokens with :func:`tokenizer_dir`'s tokenizer."""
    return "x" + " x" * (n - 1)


def s3_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Dummy credentials and the endpoint where the code looks for them; nothing ambient."""
    for name in ("AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)


def make_bucket(endpoint: str) -> str:
    """A fresh bucket on the S3 server at ``endpoint``."""
    from minio import Minio

    name = f"sarl-{uuid.uuid4().hex[:12]}"
    client = Minio(
        endpoint.removeprefix("http://"), access_key=ACCESS_KEY, secret_key=SECRET_KEY,
        secure=False,
    )  # fmt: skip
    client.make_bucket(name)
    return name


def s3_object(endpoint: str, bucket: str, key: str) -> bytes:
    """Raw bytes of an object, read with a plain minio client (not the code under test)."""
    from minio import Minio

    client = Minio(
        endpoint.removeprefix("http://"), access_key=ACCESS_KEY, secret_key=SECRET_KEY,
        secure=False,
    )  # fmt: skip
    response = client.get_object(bucket, key)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()
