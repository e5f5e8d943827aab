"""``sarl reward diagnose NAME ...``: the validity figures of rewards on traces with answers —
against the Python API on a small file and on the bundled traces (structure with the loopback
embedding server, then the bundled local model), the plot, and clear errors for bad input."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from sarl.cli import lines as cli_lines
from sarl.cli.main import app
from sarl.evaluation.validity import validity
from sarl.rewards.base import PerSampleReward, RewardOutput, Sample
from sarl.rewards.math_answer import response_correct
from sarl.rewards.registry import create_reward
from sarl.rewards.samples import parse_sample
from tests.sarl.evaluation.reference_bootstrap import bootstrap_intervals
from tests.support.embedding_server import EmbeddingServer, running_embedding_server

REPO = Path(__file__).resolve().parents[3]
BUNDLED = REPO / "examples" / "traces" / "grouped_math.jsonl"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["reward", "diagnose", *map(str, args)])


def write_lines(path: Path, items: Sequence[dict[str, Any] | bytes]) -> Path:
    raw = [i if isinstance(i, bytes) else json.dumps(i).encode() for i in items]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def boxed(answer: object) -> str:
    return f"<think>\nwork\n\nmore work\n</think>\nThe answer is \\boxed{{{answer}}}."


#: 3 prompts x 4 responses; the right answers are 7, 12 and 30.
SMALL = [
    {"prompt": p, "response": boxed(a), "ground_truth": truth}
    for p, truth, answers in (
        ("3 + 4?", "7", (7, 7, 8, 9)),
        ("3 * 4?", 12, (12, 13, 13, 13)),  # a number as the truth
        ("5 * 6?", "30", (30, 30, 30, 31)),
    )
    for a in answers
]


@pytest.fixture(scope="module")
def embedder() -> Iterator[EmbeddingServer]:
    with running_embedding_server(dim=16) as server:
        yield server


def remote_structure(tmp_path: Path, server: EmbeddingServer) -> Path:
    path = tmp_path / "structure.json"
    path.write_text(json.dumps({"embedder": {"kind": "openai", "url": server.url, "model": "m"}}))
    return path


def direct(name: str, settings: dict[str, Any], objs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the Python API gives: per figure, validity and the pure bootstrap's intervals."""
    reward = create_reward(name, settings)
    keys = [o["prompt"] for o in objs]
    order = list(dict.fromkeys(keys))
    groups = [[i for i, k in enumerate(keys) if k == key] for key in order]
    if not reward.needs_group:
        groups = [[i] for i in range(len(objs))]
    try:
        outputs = reward.score_groups([[parse_sample(objs[i]) for i in g] for g in groups])
    finally:
        reward.close()
    by_index = {
        i: out
        for g, outs in zip(groups, outputs, strict=True)
        for i, out in zip(g, outs, strict=True)
    }
    correct = [response_correct(o["response"], str(o["ground_truth"])) for o in objs]
    out: dict[str, Any] = {}
    for figure in ("score", *reward.component_keys):
        values = [
            by_index[i].score if figure == "score" else by_index[i].components[figure]
            for i in range(len(objs))
        ]
        v = validity(values, correct, keys)
        intervals = bootstrap_intervals(values, correct, keys, resamples=200, seed=5)
        out[figure] = (v, intervals)
    return out


def check_against_api(doc: dict[str, Any], name: str, expected: dict[str, Any]) -> None:
    figures = doc["rewards"][name]["figures"]
    assert list(figures) == list(expected)
    for figure, (v, intervals) in expected.items():
        got = figures[figure]
        for key in ("auroc", "pair_agreement", "pair_ties"):
            want = getattr(v, key)
            assert got[key] == (None if want is None else pytest.approx(want)), (figure, key)
            interval = intervals.get(key)
            assert got[f"{key}_interval"] == (
                None if interval is None else pytest.approx(list(interval))
            ), (figure, key)
        assert (got["samples"], got["correct"], got["pairs"]) == (v.samples, v.correct, v.pairs)


# -- the figures -----------------------------------------------------------------------------------


def test_small_file_matches_the_python_api(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", SMALL)
    result = invoke(
        "ground_truth", "format_length", "-i", path, "--resamples", "200", "--seed", "5", "--json"
    )
    assert result.exit_code == cli_lines.EXIT_OK, result.output
    doc = json.loads(result.stdout)
    assert (doc["lines"], doc["responses"], doc["correct"], doc["groups"]) == (12, 12, 6, 3)
    assert (doc["skipped"], doc["resamples"], doc["seed"]) == (0, 200, 5)
    assert list(doc["rewards"]) == [  # side by side, in order, then the trivial predictors
        "ground_truth",
        "format_length",
        "trivial.has_answer",
        "trivial.format_valid",
    ]
    for name in ("ground_truth", "format_length"):
        check_against_api(doc, name, direct(name, {}, SMALL))
    gt = doc["rewards"]["ground_truth"]["figures"]["score"]
    # 2x2 + 1x3 + 3x1 (correct, incorrect) pairs, every one ordered right by the outcome reward
    assert (gt["auroc"], gt["pair_agreement"], gt["pairs"]) == (1.0, 1.0, 10)
    # every response has a boxed answer: the trivial predictor ties every pair (0.5), the
    # outcome reward beats it by 0.5 on the same resamples; counts come with the figures
    floor = doc["rewards"]["trivial.has_answer"]["figures"]["score"]
    assert (floor["pair_auroc"], floor["flagged"], floor["versus_trivial"]) == (0.5, False, {})
    versus = gt["versus_trivial"]["pair_auroc"]
    assert versus["baseline"] == "trivial.has_answer"
    assert versus["difference"] == 0.5 and versus["beats"] and not gt["flagged"]
    assert (gt["prompts"], gt["mixed_prompts"]) == (3, 3)
    assert "only 3 prompts" in gt["warning"]


def test_group_rewards_score_whole_groups(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", SMALL)
    result = invoke("ttrl", "-i", path, "--resamples", "200", "--seed", "5", "--json")
    assert result.exit_code == cli_lines.EXIT_OK, result.output
    check_against_api(json.loads(result.stdout), "ttrl", direct("ttrl", {}, SMALL))


def test_the_bundled_traces_with_structure_and_ground_truth(
    tmp_path: Path, embedder: EmbeddingServer
) -> None:
    settings = remote_structure(tmp_path, embedder)
    plot = tmp_path / "plots" / "validity.png"
    result = invoke(
        "structure", "ground_truth", "-i", BUNDLED, "-s", f"structure={settings}",
        "--resamples", "200", "--seed", "5", "--json", "--plot", plot,
    )  # fmt: skip
    assert result.exit_code == cli_lines.EXIT_OK, result.output
    doc = json.loads(result.stdout)
    objs = [json.loads(line) for line in BUNDLED.read_text().splitlines()]
    assert (doc["responses"], doc["correct"], doc["groups"]) == (8, 6, 2)
    structure_settings = json.loads(settings.read_text())
    check_against_api(doc, "structure", direct("structure", structure_settings, objs))
    check_against_api(doc, "ground_truth", direct("ground_truth", {}, objs))
    assert "path_length" in doc["rewards"]["structure"]["notes"][0]
    data = plot.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1200 and height > 400
    assert f"wrote {plot}" in result.stderr


def test_the_table_puts_rewards_side_by_side(tmp_path: Path, embedder: EmbeddingServer) -> None:
    settings = remote_structure(tmp_path, embedder)
    result = invoke("structure", "ground_truth", "-i", BUNDLED, "-s", f"structure={settings}")
    assert result.exit_code == cli_lines.EXIT_OK, result.output
    text = result.stdout
    assert "8 responses, 6 correct, 2 prompts (by prompt)" in text
    for header in ("within-prompt AUROC", "pooled AUROC", "pair ties", "beats trivial", "pairs"):
        assert header in text
    assert "trivial.has_answer" in text and "trivial.format_valid" in text
    assert "warning: only 2 prompts with both a correct and an incorrect response" in text
    for label in ("score (SR)", "clustering (C)", "path_length (L)", "has_answer"):
        assert label in text
    gt_row = next(line for line in text.splitlines() if line.strip().startswith("ground_truth"))
    assert "1.000 [1.000, 1.000]" in gt_row
    assert "lower is better" in text  # L is reported as computed, and the table says so
    assert "bootstrap over prompts (1000 resamples, seed 0)" in text


@pytest.mark.slow
def test_the_bundled_traces_with_the_bundled_local_embedder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # structure's default: the bundled MiniLM
    result = invoke("structure", "-i", BUNDLED, "--resamples", "100", "--json")
    assert result.exit_code == cli_lines.EXIT_OK, result.output
    sr = json.loads(result.stdout)["rewards"]["structure"]["figures"]["score"]
    assert sr["samples"] == 8 and sr["pairs"] == 6
    assert 0.0 <= sr["auroc"] <= 1.0


def test_answer_field_and_truth_field(tmp_path: Path) -> None:
    renamed = [{"prompt": o["prompt"], "response": o["response"], "answer": o["ground_truth"]}
               for o in SMALL]  # fmt: skip
    path = write_lines(tmp_path / "in.jsonl", renamed)
    auto = invoke("ground_truth", "-i", path, "--json", "--resamples", "50")
    assert auto.exit_code == cli_lines.EXIT_OK, auto.output
    assert json.loads(auto.stdout)["correct"] == 6
    other = [{"q": o["prompt"], "response": o["response"], "ref": o["ground_truth"]} for o in SMALL]
    path = write_lines(tmp_path / "other.jsonl", other)
    named = invoke("ground_truth", "-i", path, "--truth-field", "ref", "-g", "q", "--json")
    assert named.exit_code == cli_lines.EXIT_OK, named.output
    doc = json.loads(named.stdout)
    assert (doc["correct"], doc["groups"], doc["group_by"], doc["truth_field"]) == (
        6, 3, "q", "ref",
    )  # fmt: skip
    assert doc["rewards"]["ground_truth"]["figures"]["score"]["pairs"] == 10


def test_settings_file_alone_with_one_reward(tmp_path: Path) -> None:
    settings = tmp_path / "gt.yaml"
    settings.write_text("wrong_score: -1\n")
    path = write_lines(tmp_path / "in.jsonl", SMALL)
    result = invoke("ground_truth", "-i", path, "-s", settings, "--json", "--resamples", "20")
    assert result.exit_code == cli_lines.EXIT_OK, result.output
    assert json.loads(result.stdout)["rewards"]["ground_truth"]["figures"]["score"]["auroc"] == 1


# -- bad input -------------------------------------------------------------------------------------


def test_lines_without_ground_truth_are_skipped_and_named(tmp_path: Path) -> None:
    items: list[dict[str, Any] | bytes] = [*SMALL, {"prompt": "3 + 4?", "response": boxed(7)}]
    items.append(b"[1, 2]")
    path = write_lines(tmp_path / "in.jsonl", items)
    result = invoke("ground_truth", "-i", path, "--json", "--resamples", "20")
    assert result.exit_code == cli_lines.EXIT_INVALID_LINES
    doc = json.loads(result.stdout)
    assert (doc["lines"], doc["responses"], doc["skipped"]) == (14, 12, 2)
    assert "warning: 2 lines skipped:" in result.stderr
    assert "line 13: ground_truth or answer: missing or null" in result.stderr
    assert "--truth-field" in result.stderr
    assert "line 14: expected a JSON object, got an array" in result.stderr


@pytest.mark.parametrize(
    ("items", "args", "message"),
    [
        ([], [], "no lines; expected JSON Lines with response, ground_truth and prompt"),
        (
            [{"prompt": "p", "response": "r"}] * 4,
            [],
            "no usable line of 4: line 1, 2, 3 ...: ground_truth or answer: missing or null",
        ),
        ([{"prompt": "p", "response": "r", "ground_truth": "1"}], ["--truth-field", "ref"],
         "line 1: ref: missing or null: give the line its reference answer"),
        ([{"response": "r", "ground_truth": "1"}], [], "line 1: prompt: missing (the field"),
        ([{"prompt": "p", "response": 3, "ground_truth": "1"}], [],
         "response: expected a string, got a number"),
        ([{"prompt": "p", "response": "r", "ground_truth": [1]}], [],
         "ground_truth: expected a string or a number, got an array"),
    ],
)  # fmt: skip
def test_no_usable_line_is_a_usage_error(
    tmp_path: Path, items: list[dict[str, Any]], args: list[str], message: str
) -> None:
    path = tmp_path / "in.jsonl"
    if items:
        write_lines(path, items)
    else:
        path.write_bytes(b"")
    result = invoke("ground_truth", "-i", path, *args)
    assert result.exit_code == cli_lines.EXIT_USAGE
    assert message in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["structur"], "unknown name 'structur'; did you mean 'structure'?"),
        (["self_certainty"], "cannot score existing traces"),
        (["ground_truth", "ground_truth"], "ground_truth named twice"),
        (["ground_truth", "ttrl", "-s", "x.yaml"], "with several rewards give NAME=FILE"),
        (["ground_truth", "-s", "ground_truth=/nonexistent.yaml"], "no such file"),
        (["ground_truth", "-g", ""], "--group-by: must name a field"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    path = write_lines(tmp_path / "in.jsonl", SMALL)
    result = invoke(*args, "-i", path)
    assert result.exit_code == cli_lines.EXIT_USAGE, result.output
    assert message in result.stderr


class _NoSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PickyReward(PerSampleReward):
    """The response's length; refuses responses answering 13 (a reward's own error)."""

    name = "picky"
    Settings = _NoSettings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        if "{13}" in sample.response:
            raise ValueError("no 13s\nhere")
        return RewardOutput(float(len(sample.response)))


class BuggyReward(PerSampleReward):
    name = "buggy"
    Settings = _NoSettings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        raise TypeError("a bug")


def test_a_line_one_reward_cannot_score_counts_for_the_others(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", SMALL)
    picky = f"{__name__}:PickyReward"
    result = invoke("ground_truth", picky, "-i", path, "--json", "--resamples", "20")
    assert result.exit_code == cli_lines.EXIT_INVALID_LINES, result.output
    doc = json.loads(result.stdout)
    assert doc["not_scored"] == {"ground_truth": 0, picky: 3}
    assert f"warning: 3 lines not scored by {picky}:" in result.stderr
    assert "line 6: scoring failed: no 13s here" in result.stderr  # the input's line numbers
    assert doc["rewards"]["ground_truth"]["figures"]["score"]["samples"] == 12
    assert doc["rewards"][picky]["figures"]["score"]["samples"] == 9


def test_a_reward_bug_is_an_internal_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", SMALL)
    result = invoke(f"{__name__}:BuggyReward", "-i", path)
    assert result.exit_code == cli_lines.EXIT_INTERNAL
    assert result.stderr.strip() == "error: internal error: TypeError: a bug"
