"""The job's prompts: the local runner's split, written in verl's dataset layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.spec.experiment import Experiment
from sarl_jobs.data import dataset_location, problems, verl_rows


def test_rows_carry_prompt_answer_and_source() -> None:
    exp = Experiment.model_validate(
        {"metadata": {"name": "job"}, "spec": {"preset": "local-grpo-arithmetic"}}
    )
    train, evals = problems(exp)
    assert (len(train), len(evals)) == (exp.spec.data.train_size, exp.spec.evaluation.max_problems)
    rows = verl_rows(exp, train[:2], "train")
    assert rows[0]["prompt"] == [
        {
            "role": "user",
            "content": exp.spec.data.prompt_template.format(question=train[0].question),
        }
    ]
    assert rows[1]["reward_model"]["ground_truth"] == train[1].answer
    assert rows[1]["data_source"] == "arithmetic" and rows[1]["extra_info"]["index"] == 1


def test_the_paper_preset_trains_on_what_data_prepare_wrote_to_s3(
    tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sarl data prepare aime --out s3://bucket/data` then a paper-grpo-math job on the cluster:
    the preset's relative dataset resolves under SARL_DATA_URI, rows are read back by their raw
    question (the spec's template applied once) and ground truth. Real S3 (moto server)."""
    pytest.importorskip("pyarrow")
    from sarl.datasets.prepare import prepare
    from sarl.datasets.sources import get_source
    from tests.sarl.datasets.fixtures import AIME_COLUMNS, make_bucket, s3_env, write_csv

    s3_env(monkeypatch, s3_endpoint)
    bucket = make_bucket(s3_endpoint)
    rows = [[f"{1990 + i}-I-{i}", str(1990 + i), str(i), f"Find {i} + {i}.", str(2 * i), "I"]
            for i in range(1, 11)]  # fmt: skip
    csv = write_csv(tmp_path / "aime.csv", AIME_COLUMNS, rows)
    prepare(get_source("aime"), csv, f"s3://{bucket}/data")
    exp = Experiment.model_validate(
        {"metadata": {"name": "job"}, "spec": {"preset": "paper-grpo-math"}}
    )
    assert exp.spec.data.dataset == "train/aime.parquet"
    env = {"SARL_DATA_URI": f"s3://{bucket}/data"}
    assert dataset_location("train/aime.parquet", env) == f"s3://{bucket}/data/train/aime.parquet"
    train, evals = problems(exp, env)
    got = {p.question: p.answer for p in [*train, *evals]}
    assert got == {f"Find {i} + {i}.": str(2 * i) for i in range(1, 11)}
    row = verl_rows(exp, train[:1], "train")[0]
    assert row["prompt"][0]["content"].count("step by step") == 1  # template applied once


def test_missing_dataset_under_the_data_uri_names_it(tmp_path: Path) -> None:
    exp = Experiment.model_validate(
        {"metadata": {"name": "job"}, "spec": {"preset": "paper-grpo-math"}}
    )
    with pytest.raises(Exception, match="train/aime.parquet"):
        problems(exp, {"SARL_DATA_URI": str(tmp_path)})
