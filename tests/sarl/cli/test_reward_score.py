"""``sarl reward score NAME``: every registered reward offline, groups, hostile lines, usage errors,
``--out`` files and the summary — in process (CliRunner) except one run of the console script."""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from sarl.cli import lines as cli_lines
from sarl.cli.main import app
from sarl.cli.offline_scoring import OfflineScorer
from sarl.cli.score_summary import Summary
from sarl.rewards.base import PerGroupReward, PerSampleReward, RewardOutput, Sample
from sarl.rewards.registry import create_reward, get_reward_class, reward_names
from sarl.rewards.samples import parse_sample
from tests.sarl.cli.conftest import SDK_SRC, _command
from tests.support.chat_server import ChatRequest, ChatServer, running_chat_server
from tests.support.embedding_server import EmbeddingServer, running_embedding_server

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "traces" / "grouped_math.jsonl"
P1 = "What is 12 * 13?"
QA_TRACE = (
    "<think><ask> How many eggs are left to sell? </ask><reflect> 16 - 7 = 9. </reflect>\n"
    "<ask> What do 9 eggs at $2 bring? </ask><reflect> 9 x 2 = 18. </reflect></think>\n"
    "<answer>18</answer>"
)
DECOMPOSITION = "Step 1\n[Meta-reasoning]: compute\n[Sub-problem]: the product\n[Answer]: 156"


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["reward", "score", *map(str, args)])


def rows_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def write_lines(path: Path, items: Sequence[dict[str, Any] | bytes]) -> Path:
    raw = [i if isinstance(i, bytes) else json.dumps(i).encode() for i in items]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def example_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]


# --- every registered reward, offline, against the Python API --------------------------------


def chat_script(request: ChatRequest) -> str:
    """One loopback server plays rlkd's decomposer and match judge and structured_qa's judge."""
    if "[Reasoning Path]:" in request.text:
        return DECOMPOSITION
    if "[Text A]:" in request.text:
        return "yes"
    pairs = re.search(r"REASONING \((\d+) pairs\)", request.text)
    n = int(pairs.group(1)) if pairs else 0
    return json.dumps({"pairs": [{"pair": i + 1, "relevance": 1, "quality": 1} for i in range(n)]})


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    with running_chat_server(chat_script) as server:
        yield server


@pytest.fixture(scope="module")
def embedder() -> Iterator[EmbeddingServer]:
    with running_embedding_server(dim=16) as server:
        yield server


def remote_structure(server: EmbeddingServer) -> dict[str, Any]:
    return {"embedder": {"kind": "openai", "url": server.url, "model": "pseudo"}}


def tiny_causal_lm(directory: Path) -> str:
    """The tiny random Qwen3 of the MAX-Flow tests, saved where ``settings.model`` points."""
    from tests.sarl.rewards.tagged.test_maxflow_model import _model, _tokenizer

    tokenizer = _tokenizer()
    _model(len(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def settings_for(name: str, chat: ChatServer, tmp_path: Path) -> dict[str, Any]:
    """Remote endpoints at the loopback servers, a local model for tag_maxflow, else defaults."""
    if name == "structured_qa":
        return {"judge_client": {"url": chat.url, "model": "judge"}}
    if name == "rlkd":
        return {"decomposer": {"url": chat.url, "model": "m", "backoff_seconds": 0.01}}
    if name == "tag_maxflow":
        return {"model": tiny_causal_lm(tmp_path / "lm")}
    return {}


def direct_rows(name: str, settings: dict[str, Any], objs: list[dict[str, Any]]) -> list[Any]:
    """What the Python API gives the same samples, grouped by prompt for group rewards."""
    reward = create_reward(name, settings)
    keys = [o["prompt"] if reward.needs_group else i for i, o in enumerate(objs)]
    groups = [[i for i, k in enumerate(keys) if k == key] for key in dict.fromkeys(keys)]
    try:
        outputs = reward.score_groups([[parse_sample(objs[i]) for i in g] for g in groups])
    finally:
        reward.close()
    rows: list[Any] = [None] * len(objs)
    for group, outs in zip(groups, outputs, strict=True):
        for i, out in zip(group, outs, strict=True):
            rows[i] = {
                k: None if math.isnan(v) else v
                for k, v in {"score": out.score, **out.components}.items()
            }
    return rows


OFFLINE_REWARDS = [name for name in reward_names() if name != "self_certainty"]


@pytest.mark.parametrize("name", OFFLINE_REWARDS)
def test_every_registered_reward_scores_traces_as_the_api_does(
    name: str, chat: ChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # structure: the bundled local embedding model
    objs = [{**o, "teacher": "12 * 13 = 156"} for o in example_rows()]
    qa = {"prompt": "Janet sells eggs.", "ground_truth": "18", "teacher": "9 eggs, $18"}
    objs += [{**qa, "response": QA_TRACE}, {**qa, "response": QA_TRACE.replace("18<", "17<")}]
    settings = settings_for(name, chat, tmp_path)
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(settings))
    result = invoke(name, "--input", write_lines(tmp_path / "in.jsonl", objs), "-s", settings_file)
    assert result.exit_code == cli_lines.EXIT_OK, result.output
    rows = rows_of(result.stdout)
    assert len(rows) == len(objs)
    components = get_reward_class(name).components
    # structure's lines also carry each step's cluster (its own contract: test_reward_structure)
    labels = ["labels"] if name == "structure" else []
    assert all(list(row) == ["score", *components, *labels] for row in rows)
    assert [{k: row[k] for k in ("score", *components)} for row in rows] == direct_rows(
        name, settings, objs
    )
    if name == "structured_qa":  # the judge at the settings' URL graded the two QA traces
        assert [r["r_judge"] for r in rows[-2:]] == [1.0, 1.0]
    if name == "rlkd":  # the decomposer and match judge at the settings' URL answered
        assert all(r["failed"] == 0.0 and r["matched_steps"] == 1.0 for r in rows)


def test_self_certainty_is_refused_before_reading_input() -> None:
    result = invoke("self_certainty", "--input", "/nonexistent")
    assert result.exit_code == cli_lines.EXIT_USAGE
    assert "needs the policy's logits" in result.stderr


# --- groups --------------------------------------------------------------------------------


def boxed(answer: str, **fields: Any) -> dict[str, Any]:
    return {"response": f"\\boxed{{{answer}}}", **fields}


def test_groups_are_exact_field_values_and_lines_without_the_field_are_errors(
    tmp_path: Path,
) -> None:
    items: list[dict[str, Any] | bytes] = [
        boxed("1", k="a"),
        boxed("1", k="a"),
        boxed("2", k="a"),
        boxed("2", k=1),  # 1 and "1" are different groups: merged they would tie (no label)
        boxed("3", k="1"),
        boxed("5", k="a "),  # no whitespace folding
        boxed("1", k=True),
        boxed("1"),
        {"k": "a", "response": 7},  # an invalid member: group "a" is scored without it
    ]
    result = invoke("ttrl", "--group-by", "k", "--input", write_lines(tmp_path / "g.jsonl", items))
    assert result.exit_code == cli_lines.EXIT_INVALID_LINES
    rows = rows_of(result.stdout)
    assert [r.get("score") for r in rows[:6]] == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert [r.get("majority_ratio") for r in rows[:6]] == [2 / 3, 2 / 3, 2 / 3, 1.0, 1.0, 1.0]
    assert (
        rows[6]["error"] == "line 7: k: expected a string or an integer to group by, got a boolean"
    )
    assert rows[7]["error"] == "line 8: k: missing (the field samples are grouped by)"
    assert rows[8]["error"] == "line 9: response: expected a string, got a number"


def test_the_default_group_field_is_prompt_and_per_sample_rewards_ignore_it(
    tmp_path: Path,
) -> None:
    path = write_lines(tmp_path / "in.jsonl", [boxed("1", ground_truth="1")])
    empo = invoke("empo", "--input", path)
    assert (
        rows_of(empo.stdout)[0]["error"]
        == "line 1: prompt: missing (the field samples are grouped by)"
    )
    truth = invoke("ground_truth", "--input", path)
    assert truth.exit_code == cli_lines.EXIT_OK
    assert rows_of(truth.stdout) == [{"score": 1.0, "has_answer": 1.0, "correct": 1.0}]


@pytest.mark.parametrize("name", ["format_length", "ttrl"])
@pytest.mark.parametrize("chunk_lines", [1, 3, 1024])
def test_results_do_not_depend_on_chunk_or_batch_size(name: str, chunk_lines: int) -> None:
    raw = EXAMPLE.read_bytes()
    reward = create_reward(name)
    scorer = OfflineScorer(reward, group_by="prompt", chunk_lines=chunk_lines)
    rows = [r.row for batch in scorer.results(io.BytesIO(raw)) for r in batch]
    assert rows == rows_of(invoke(name, "--input", EXAMPLE).stdout)


class _NoSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExplodingGroupReward(PerGroupReward):
    """Scores the group size; raises for a group holding "boom" (a reward's own error)."""

    name = "exploding_group"
    Settings = _NoSettings
    needs_group = True
    components = ("size",)

    def score_group(self, group: Sequence[Sample], index: int) -> list[RewardOutput]:
        if any("boom" in s.response for s in group):
            raise ValueError("boom\nin the group")
        return [RewardOutput(float(len(group)), {"size": float(len(group))}) for _ in group]


class BuggyReward(PerSampleReward):
    name = "buggy"
    Settings = _NoSettings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        raise TypeError("a bug\non two lines")


def test_a_reward_error_stays_on_the_group_that_raised_it(tmp_path: Path) -> None:
    items: list[dict[str, Any] | bytes] = [
        {"prompt": "p1", "response": "x"},
        {"prompt": "p2", "response": "boom"},
        {"prompt": "p1", "response": "y"},
        {"prompt": "p2", "response": "z"},
        {"prompt": "p3", "response": "w"},
    ]
    name = f"{__name__}:ExplodingGroupReward"
    result = invoke(name, "--input", write_lines(tmp_path / "in.jsonl", items))
    assert result.exit_code == cli_lines.EXIT_INVALID_LINES
    rows = rows_of(result.stdout)
    assert [rows[i]["score"] for i in (0, 2, 4)] == [2.0, 2.0, 1.0]
    assert rows[1]["error"] == "line 2: scoring failed: boom in the group"
    assert rows[3]["error"] == "line 4: scoring failed: boom in the group"


def test_a_reward_bug_is_an_internal_error_exit_3(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [{"response": "x"}])
    result = invoke(f"{__name__}:BuggyReward", "--input", path)
    assert result.exit_code == cli_lines.EXIT_INTERNAL
    assert result.stderr == "error: internal error: TypeError: a bug on two lines\n"


# --- hostile lines ---------------------------------------------------------------------------

HOSTILE = [
    b"\xff\xfe not UTF-8",
    b'{"prompt": "What is 12 * 13?", "response": "caf\xc3\xa9 \xed\xa0\x80"}',  # encoded surrogate
    b'{"prompt": "What is 12 * 13?", "response": "a\rb", "ground_truth": "156"}',  # \r in a string
    b"[" * 50_000 + b"]" * 50_000,
    b'{"response": ' + b"{" * 5000 + b"}",
    b'{"prompt": "What is 12 * 13?", "ground_truth": "156"}',
    b'{"prompt": "What is 12 * 13?", "response": 5, "ground_truth": "156"}',
    b'{"prompt": "What is 12 * 13?", "response": "x", "ground_truth": [1' + b"0" * 5000 + b"]}",
    b"   ",
    b'["a JSON array"]',
]


def hostile_mix(tmp_path: Path) -> tuple[Path, Path, list[int], int]:
    """The example traces with a hostile line after each good one; the last good line ends in
    ``\\r`` (JSON whitespace: still good). Returns the mixed file, the good-only file, the line
    numbers of the good lines in the mixed file and its number of lines."""
    good = [json.dumps(o).encode() for o in example_rows()]
    good[-1] += b"\r"
    mixed: list[bytes] = []
    numbers = []
    for i, line in enumerate(good):
        mixed.append(line)
        numbers.append(len(mixed))
        mixed.append(HOSTILE[i % len(HOSTILE)])
    mixed += HOSTILE[len(good) :]
    mixed_path = write_lines(tmp_path / "mixed.jsonl", mixed)
    return mixed_path, write_lines(tmp_path / "good.jsonl", good), numbers, len(mixed)


@pytest.mark.parametrize(
    "name", ["ground_truth", "format_length", "ttrl", "empo", "tag_lcs", "structure"]
)
def test_hostile_lines_get_one_error_each_and_never_change_a_good_line(
    name: str, tmp_path: Path, embedder: EmbeddingServer
) -> None:
    mixed, good, numbers, n_lines = hostile_mix(tmp_path)
    settings = tmp_path / "settings.yaml"
    settings.write_text(json.dumps(remote_structure(embedder) if name == "structure" else {}))
    result = invoke(name, "--input", mixed, "--settings", settings)
    alone = invoke(name, "--input", good, "--settings", settings)
    assert result.exit_code == cli_lines.EXIT_INVALID_LINES, result.output
    assert alone.exit_code == cli_lines.EXIT_OK, alone.output
    rows = rows_of(result.stdout)
    assert len(rows) == n_lines
    assert [rows[n - 1] for n in numbers] == rows_of(alone.stdout)
    for number, row in enumerate(rows, start=1):
        if number not in numbers:
            assert row["line"] == number and row["error"].startswith(f"line {number}: ")
    errors = [r["error"] for r in rows if "error" in r]
    assert errors[0] == "line 2: invalid UTF-8 at byte 1 of the line"
    assert any("nested too deeply" in e for e in errors)
    assert any("Invalid control character" in e for e in errors)
    assert any("empty line" in e for e in errors)
    assert any("expected a JSON object, got an array" in e for e in errors)


def test_the_console_script_reads_hostile_bytes_from_stdin() -> None:
    stdin = b"\n".join([*HOSTILE[:4], json.dumps(boxed("7", ground_truth="7")).encode()]) + b"\n"
    env = {**os.environ, "PYTHONPATH": str(SDK_SRC)}
    proc = subprocess.run(
        [*_command(), "reward", "score", "ground_truth"],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == cli_lines.EXIT_INVALID_LINES
    assert b"Traceback" not in proc.stderr
    rows = rows_of(proc.stdout.decode("ascii"))
    assert len(rows) == 5 and [r.get("line") for r in rows[:4]] == [1, 2, 3, 4]
    assert rows[4] == {"score": 1.0, "has_answer": 1.0, "correct": 1.0}


# --- usage errors, settings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "settings", "message"),
    [
        (["nope"], None, "unknown name 'nope'"),
        (["empo"], "entropy_min: -1\n", "setting 'entropy_min'=-1: Input should be greater"),
        (["empo"], "[1, 2]\n", "expected a mapping of setting names to values"),
        (["empo"], "{a: [\n", "not valid YAML or JSON"),
        (["ground_truth"], '{"correct_scor": 2}', "'correct_scor'"),
        (["rlkd"], None, "setting 'decomposer'"),
        (["empo", "--maps", "2"], None, "--maps: only the structure reward"),
        (["structure", "--maps", "2"], None, "--maps: needs --out"),
        (["ttrl", "--group-by", ""], None, "--group-by: must name a field"),
        (["empo", "--maps", "-1"], None, "--maps"),
        (["structure", "--set", "variant"], None, "--set: expected KEY=VALUE"),
        (["structure", "--set", "variant=[a"], None, "VALUE is YAML"),
        (["structure", "--set", "seed=1", "--set", "seed.x=2"], None, "seed is not a mapping"),
        (["empo", "--set", "entropy_min=-1"], None, "--set: reward 'empo': setting 'entropy_min'"),
    ],
)
def test_usage_errors_exit_2_naming_the_option_or_field(
    args: list[str], settings: str | None, message: str, tmp_path: Path
) -> None:
    extra: list[str | Path] = ["--input", EXAMPLE]
    if settings is not None:
        (tmp_path / "s.yaml").write_text(settings)
        extra += ["--settings", tmp_path / "s.yaml"]
    result = invoke(*args, *extra)
    assert result.exit_code == cli_lines.EXIT_USAGE
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("option", "value"), [("--input", "nope.jsonl"), ("--settings", "nope.yaml")]
)
def test_missing_files_exit_2(option: str, value: str, tmp_path: Path) -> None:
    args = ["--input", str(EXAMPLE), option, str(tmp_path / value)]
    result = invoke("ground_truth", *args)
    assert result.exit_code == cli_lines.EXIT_USAGE
    assert f"{option}: no such file" in result.stderr


def test_settings_from_yaml_reach_the_reward(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("correct_score: 2.5\nwrong_score: -1\n")
    result = invoke("ground_truth", "--input", EXAMPLE, "--settings", tmp_path / "s.yaml")
    assert [r["score"] for r in rows_of(result.stdout)] == [2.5, 2.5, 2.5, -1, 2.5, 2.5, -1, 2.5]


def test_set_changes_a_setting_after_the_settings_file(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("correct_score: 2.5\nwrong_score: -1\n")
    args = ["--input", EXAMPLE, "--settings", tmp_path / "s.yaml", "--set", "correct_score=3"]
    result = invoke("ground_truth", *args)
    assert [r["score"] for r in rows_of(result.stdout)] == [3, 3, 3, -1, 3, 3, -1, 3]


def test_exit_codes_are_in_the_help() -> None:
    result = invoke("--help")
    assert all(f"{code} = " in result.output for code in "0123")


# --- --out and the summary -------------------------------------------------------------------


def test_out_writes_scores_jsonl_and_the_first_maps(
    tmp_path: Path, embedder: EmbeddingServer
) -> None:
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps(remote_structure(embedder)))
    items = [b"not json", *(json.dumps(o).encode() for o in example_rows()[:3])]
    path = write_lines(tmp_path / "in.jsonl", items)
    out = tmp_path / "out"
    result = invoke("structure", "-i", path, "-s", settings, "--out", out, "--maps", "2")
    plain = invoke("structure", "-i", path, "-s", settings)
    assert result.exit_code == plain.exit_code == cli_lines.EXIT_INVALID_LINES
    assert result.stdout == ""
    assert (out / "scores.jsonl").read_text() == plain.stdout
    assert sorted(p.name for p in out.glob("*.png")) == ["line-2.png", "line-3.png"]
    assert (out / "line-2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote 4 results to {out / 'scores.jsonl'} and 2 reasoning maps" in result.stderr


def test_out_without_maps_for_other_rewards(tmp_path: Path) -> None:
    result = invoke("tag_format", "-i", EXAMPLE, "--out", tmp_path / "o")
    assert result.exit_code == cli_lines.EXIT_OK
    assert len(rows_of((tmp_path / "o" / "scores.jsonl").read_text())) == 8
    assert not list((tmp_path / "o").glob("*.png"))


def table_row(stderr: str, metric: str) -> list[str]:
    return next(line.split() for line in stderr.splitlines() if line.split()[:1] == [metric])


def test_summary_counts_lines_and_gives_mean_min_max_per_component(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "in.jsonl", [*example_rows(), b"{}"])
    result = invoke("ground_truth", "--input", path)
    assert result.exit_code == cli_lines.EXIT_INVALID_LINES
    assert "reward ground_truth: 9 lines, 8 scored, 1 invalid" in result.stderr
    # 6 of the 8 example answers are right (mul-4 and div-3 are not)
    assert table_row(result.stderr, "score") == ["score", "8", "0.7500", "0.0000", "1.0000"]
    assert table_row(result.stderr, "correct") == ["correct", "8", "0.7500", "0.0000", "1.0000"]
    assert table_row(result.stderr, "has_answer") == [
        "has_answer",
        "8",
        "1.0000",
        "1.0000",
        "1.0000",
    ]


def test_summary_leaves_nulls_out_of_a_metric() -> None:
    summary = Summary()
    for row in [{"score": 1.0, "c": None}, {"score": 3.0, "c": 2.0}, {"error": "line 3: x"}]:
        summary.add(row)
    assert (summary.lines, summary.scored, summary.invalid) == (3, 2, 1)
    score, c = summary.metrics["score"], summary.metrics["c"]
    assert (score.n, score.mean, score.low, score.high) == (2, 2.0, 1.0, 3.0)
    assert (c.n, c.nulls, c.mean) == (1, 1, 2.0)
