"""``prepare`` writes verl parquet atomically to a directory or to S3 (moto server), read back
with pandas."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sarl.datasets.prepare import prepare
from sarl.datasets.schema import MATH_PROMPT_TEMPLATE
from sarl.datasets.sources import get_source
from sarl.datasets.tables import DatasetError
from sarl.datasets.uris import read_parquet
from sarl.storage.base import StorageError
from tests.sarl.datasets.fixtures import (
    AIME_COLUMNS,
    AIME_ROWS,
    MATH500_ROWS,
    make_bucket,
    s3_env,
    s3_object,
    write_csv,
    write_jsonl,
)

pd = pytest.importorskip("pandas")


def test_aime_train_file_in_verl_layout(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "aime.csv", AIME_COLUMNS, AIME_ROWS)
    report = prepare(get_source("aime"), path, str(tmp_path / "data"))
    target = tmp_path / "data" / "train" / "aime.parquet"
    assert report.uri == str(target) and (report.read, report.written) == (3, 2)
    assert report.summary() == (f"aime: read 3, dropped 1 (1 empty answer), wrote 2 -> {target}")
    df = pd.read_parquet(target)
    assert list(df.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert list(df["prompt"][1]) == [
        {"role": "user", "content": MATH_PROMPT_TEMPLATE.format(question=AIME_ROWS[1][3])}
    ]
    assert df["prompt"][1][0]["content"].endswith(
        "Let's think step by step and output the final answer within \\boxed{}."
    )
    assert df["reward_model"][1] == {"style": "rule", "ground_truth": "315"}
    assert df["extra_info"][1]["split"] == "train" and df["extra_info"][1]["index"] == 1
    assert set(df["data_source"]) == {"aime_1983_2024"}
    assert [p.name for p in target.parent.iterdir()] == ["aime.parquet"]  # no temp file left


def test_benchmark_split_template_override_and_max_rows(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "math500.jsonl", MATH500_ROWS)
    report = prepare(
        get_source("math500"), path, str(tmp_path), max_rows=2, template="Q: {question}"
    )
    assert report.dropped == {"over --max-rows": 1}
    df = pd.read_parquet(tmp_path / "benchmarks" / "math500.parquet")
    assert [p[0]["content"] for p in df["prompt"]] == [
        f"Q: {r['problem']}" for r in MATH500_ROWS[:2]
    ]
    assert df["extra_info"][0]["split"] == "test"


def test_an_existing_file_is_replaced_whole(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", MATH500_ROWS)
    prepare(get_source("math500"), path, str(tmp_path), max_rows=1)
    prepare(get_source("math500"), path, str(tmp_path))
    assert len(pd.read_parquet(tmp_path / "benchmarks" / "math500.parquet")) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"template": "no placeholder"}, "--prompt-template: 'no placeholder' has no {question}"),
        ({"template": "{question} {x}"}, "not a valid format string"),
        ({"max_rows": 0}, "--max-rows: must be >= 1, got 0"),
    ],
)
def test_bad_options(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", MATH500_ROWS)
    with pytest.raises(DatasetError, match=message):
        prepare(get_source("math500"), path, str(tmp_path / "out"), **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_nothing_left_is_an_error_not_an_empty_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem": "p", "answer": ""}])
    with pytest.raises(DatasetError, match=r"no rows left after filtering \(\{'empty answer': 1\}"):
        prepare(get_source("math500"), path, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_s3_round_trip(tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s3_env(monkeypatch, s3_endpoint)
    bucket = make_bucket(s3_endpoint)
    path = write_jsonl(tmp_path / "m.jsonl", MATH500_ROWS)
    report = prepare(get_source("math500"), path, f"s3://{bucket}/sarl/data/")
    assert report.uri == f"s3://{bucket}/sarl/data/benchmarks/math500.parquet"
    df = pd.read_parquet(
        io.BytesIO(s3_object(s3_endpoint, bucket, "sarl/data/benchmarks/math500.parquet"))
    )
    assert list(df["reward_model"].map(lambda r: r["ground_truth"])) == [
        r["answer"] for r in MATH500_ROWS
    ]
    rows = read_parquet(report.uri, endpoint_url=s3_endpoint)
    assert rows[2]["extra_info"]["unique_id"] == "test/algebra/3.json"


def test_s3_errors_are_one_line(
    tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_env(monkeypatch, s3_endpoint)
    path = write_jsonl(tmp_path / "m.jsonl", MATH500_ROWS)
    with pytest.raises(
        StorageError,
        match=r"writing s3://no-such-bucket-x/d/benchmarks/math500.parquet at .* NoSuchBucket",
    ):
        prepare(get_source("math500"), path, "s3://no-such-bucket-x/d")
    with pytest.raises(
        DatasetError, match="--out: 's3:///d/benchmarks/math500.parquet' has no valid bucket"
    ):
        prepare(get_source("math500"), path, "s3:///d")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StorageError, match="no S3 credentials"):
        prepare(get_source("math500"), path, "s3://bucket-a/d")
