"""The papers' OpenRubrics-v2 filters with a real tokenizer: both references > 512 tokens, then
deduplicated instructions (sarl-v2 Appendix B.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.datasets.filters import (
    first_occurrences,
    hf_token_counter,
    long_enough,
    normalize_prompt,
)
from sarl.datasets.prepare import prepare
from sarl.datasets.sources import get_source
from sarl.datasets.tables import DatasetError
from tests.sarl.datasets.fixtures import words, write_jsonl


@pytest.mark.parametrize(
    ("lengths", "max_tokens", "expected"),
    [
        ([513, 600], None, True),
        ([512, 600], None, False),  # "longer than 512": 512 itself is out
        ([600, 100], None, False),  # both must be long
        ([], None, False),
        ([513, 4096], 4096, True),  # v1's range: upper bound inclusive
        ([513, 4097], 4096, False),
    ],
)
def test_long_enough(lengths: list[int], max_tokens: int | None, expected: bool) -> None:
    assert long_enough(lengths, 512, max_tokens) is expected


def test_duplicates_differing_only_in_case_and_spacing_are_one() -> None:
    prompts = ["Write a poem.", "write  a\npoem. ", "Write a story.", "Write a poem."]
    assert first_occurrences(prompts) == [True, False, True, False]
    assert normalize_prompt("Ｗrite\ta  POEM") == "write a poem"  # NFKC folds the wide W


def test_token_boundary_with_a_real_tokenizer(tokenizer_path: Path) -> None:
    count = hf_token_counter(tokenizer_path, progress=False)
    assert count([words(512), words(513), "alpha beta"]) == [512, 513, 2]


def _row(instruction: str, a: int, b: int) -> dict[str, str]:
    return {
        "instruction": instruction,
        "response_a": words(a),
        "response_b": words(b),
        "winner": "A",
        "rubric": "1. The response must rhyme. [Hard Rule]",
        "source": "helpsteer3",
    }


def test_prepare_filters_then_dedups_and_counts(tmp_path: Path, tokenizer_path: Path) -> None:
    rows = [
        _row("Plan a trip to Kyoto.", 600, 700),  # kept
        _row("Say hi.", 20, 900),  # one short reference
        _row("Say bye.", 512, 513),  # exactly 512: not longer
        _row("plan a trip to  kyoto.", 800, 800),  # duplicate of the first
        _row("Say hi.", 900, 900),  # first *long* "Say hi.": kept (length filter runs first)
        _row("", 900, 900),  # no instruction
    ]
    path = write_jsonl(tmp_path / "openrubric_v2.jsonl", rows)
    report = prepare(
        get_source("openrubrics"), path, str(tmp_path / "out"),
        count_tokens=hf_token_counter(tokenizer_path, progress=False),
    )  # fmt: skip
    assert (report.read, report.written) == (6, 2)
    assert report.dropped == {
        "empty question": 1, "reference response <= 512 tokens": 2, "duplicate prompt": 1,
    }  # fmt: skip
    import pandas as pd

    df = pd.read_parquet(tmp_path / "out" / "train" / "openrubrics.parquet")
    assert [p[0]["content"] for p in df["prompt"]] == ["Plan a trip to Kyoto.", "Say hi."]
    assert df["reward_model"][0] == {"style": "model", "ground_truth": ""}
    assert df["extra_info"][0]["rubric"].endswith("[Hard Rule]")
    assert set(df["data_source"]) == {"openrubrics_v2"} and set(df["ability"]) == {"open_ended"}


def test_openrubrics_without_tokenizer_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "o.jsonl", [_row("Plan.", 600, 600)])
    with pytest.raises(DatasetError, match="needs a tokenizer; pass --tokenizer DIR"):
        prepare(get_source("openrubrics"), path, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_bad_tokenizer_dir_is_named(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    with pytest.raises(DatasetError, match=f"--tokenizer: cannot load a tokenizer from {tmp_path}"):
        hf_token_counter(tmp_path)
