"""The reasoning maps a run logs say what they are of: arm and seed in a Study, step (step 0:
before RL), sample, correct or not, and excerpts of the prompt and the response."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from sarl.runner.maps import (
    PROMPT_EXCERPT,
    RESPONSE_EXCERPT,
    MapSample,
    draw_sample_maps,
    excerpt,
    map_labels,
    prompt_text,
    run_label,
    verdict,
)

STUDY_TAGS = {"sarl.role": "arm", "arm": "structure", "seed": "1", "sarl.study": "demo"}
RESPONSE = "<think>3 + 4 = 7\n\n7 * 2 = 14</think> The answer is \\boxed{14}."


@pytest.mark.parametrize(
    ("tags", "label"),
    [
        (STUDY_TAGS, "arm structure · seed 1"),
        ({}, "my-run"),
        ({"arm": "mine"}, "my-run"),  # a user's tag named arm is no Study arm
    ],
)
def test_run_label(tags: dict[str, str], label: str) -> None:
    assert run_label("my-run", tags) == label


@pytest.mark.parametrize(
    ("response", "truth", "said"),
    [
        (RESPONSE, "14", "correct: 14"),
        (RESPONSE, "15", "incorrect: answered 14, expected 15"),
        ("<think>3 + 4 = 7", "7", "incorrect: no final answer (expected 7)"),
        (RESPONSE, None, ""),
    ],
)
def test_verdict(response: str, truth: str | None, said: str) -> None:
    assert verdict(response, truth) == said


def test_title_and_caption_of_a_map() -> None:
    sample = MapSample("What is (3 + 4) * 2?\n Think.", RESPONSE, "14")
    title, caption = map_labels(sample, run="arm structure · seed 1", step=0, index=1, count=3)
    assert title == "arm structure · seed 1 · step 0 (before RL) · sample 2 of 3\ncorrect: 14"
    assert caption == (
        "prompt: What is (3 + 4) * 2? Think.\n"
        "response: <think>3 + 4 = 7 7 * 2 = 14</think> The answer is \\boxed{14}."
    )
    later, _ = map_labels(MapSample("p", "r"), run="x", step=8, index=0, count=1)
    assert later == "x · step 8 · sample 1 of 1"  # no ground truth: no verdict line


def test_excerpts_are_one_line_and_cut() -> None:
    long = "word " * 200
    cut = excerpt(long, RESPONSE_EXCERPT)
    assert len(cut) == RESPONSE_EXCERPT and cut.endswith("…") and "\n" not in cut
    assert excerpt("a\n\n b", PROMPT_EXCERPT) == "a b"
    # Stray bytes of an early policy: no font has a glyph for them.
    assert excerpt("7\x00\x19 = 7", PROMPT_EXCERPT) == "7\ufffd\ufffd = 7"


def test_prompt_text_of_a_chat_is_its_last_user_message() -> None:
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "First?"},
        {"role": "assistant", "content": "Yes."},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    assert prompt_text(chat) == "What is 2 + 2?"
    assert prompt_text("plain") == "plain"


def test_every_sample_gets_a_labelled_png(tmp_path: Path) -> None:
    from PIL import Image

    from sarl.embedding.factory import EmbedderConfig, make_embedder
    from sarl.rewards.structure import StructureRewardConfig, StructureScorer

    scorer = StructureScorer(StructureRewardConfig(), make_embedder(EmbedderConfig(kind="local")))
    samples = [MapSample("What is (3 + 4) * 2?", RESPONSE, "14"), MapSample("Q2", "\x19\x00", "1")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "Glyph 25 missing from font(s)"
        paths = draw_sample_maps(samples, scorer, tmp_path, run="arm structure · seed 1", step=8)
    assert [p.name for p in paths] == ["sample-0.png", "sample-1.png"]
    texts = [Image.open(p).text for p in paths]
    assert texts[0]["Title"] == "arm structure · seed 1 · step 8 · sample 1 of 2\ncorrect: 14"
    assert texts[1]["Title"].endswith("incorrect: no final answer (expected 1)")
    assert texts[0]["Description"].startswith("prompt: What is (3 + 4) * 2?\nresponse: <think>")
    assert draw_sample_maps(samples, None, tmp_path / "none", run="x", step=8) == []
