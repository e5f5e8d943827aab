"""The ``sarl reward structure`` contract: JSON Lines in, one JSON object per line out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sarl.rewards.structure.result import OUTPUT_KEYS
from tests.sarl.cli.conftest import RunCli, jsonl, outputs

THREE_STEPS = "<think>a\n\nb\n\nc</think>answer"


def test_labels_only_lines_need_no_model_and_follow_the_paper(run_cli: RunCli) -> None:
    proc = run_cli(
        "reward",
        "structure",
        stdin=jsonl(
            [
                {"step_labels": [0, 1, 2]},
                {"step_labels": [0, 1, 2, 3, 0, 2, 1, 3]},
                {"response": THREE_STEPS, "step_labels": [4, 4, 4]},
            ]
        ),
    )
    assert proc.returncode == 0, proc.stderr
    rows = outputs(proc)
    assert [list(r) for r in rows] == [list(OUTPUT_KEYS)] * 3
    assert rows[0]["score"] == pytest.approx(3 / 7)
    assert rows[1]["score"] == pytest.approx(1.0)
    assert rows[1]["num_edges"] == 6
    assert rows[2] == {
        "score": 0.0,
        "clustering": 0.0,
        "path_length": None,
        "num_steps": 3,
        "num_nodes": 1,
        "num_edges": 0,
        "labels": [0, 0, 0],
    }


def test_step_embeddings_are_clustered(run_cli: RunCli) -> None:
    far = [
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
        [1, 0.01, 0],
        [0, 1, 0.01],
        [0.01, 0, 1],
        [1, 0, 0.01],
        [0, 1.01, 0],
        [0, 0.02, 1],
    ]  # M = 9 -> k = 3, a triangle walk
    proc = run_cli("reward", "structure", stdin=jsonl([{"step_embeddings": far}]))
    assert proc.returncode == 0, proc.stderr
    row = outputs(proc)[0]
    assert row["labels"] == [0, 1, 2] * 3
    assert row["score"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ({"response": 5}, "response: expected a string, got 5"),
        ({"step_labels": "abc"}, "step_labels: expected a list of integers"),
        ({"step_labels": [0, 1.5]}, "step_labels[1]"),
        ({"step_labels": [0, -2]}, "step_labels[1]: expected an integer >= 0, got -2"),
        ({"step_labels": [True, 0]}, "step_labels[0]"),
        ({"response": THREE_STEPS, "step_labels": [0, 1]}, "has 2 entries but the response has 3"),
        ({"step_embeddings": [[1, 0], [1]]}, "step_embeddings[1]: has 1 values"),
        ({"step_embeddings": [[0, 0], [1, 0]]}, "step_embeddings[0]: is a zero vector"),
        ({"step_embeddings": [[1, "x"]]}, "step_embeddings[0][1]"),
        ({"step_labels": [0], "step_embeddings": [[1.0]]}, "either step_labels or step_embeddings"),
        ({"prompt": "no response"}, "response: missing"),
    ],
)
def test_a_malformed_line_reports_its_number_and_others_still_score(
    run_cli: RunCli, line: object, message: str
) -> None:
    proc = run_cli(
        "reward",
        "structure",
        stdin=jsonl([{"step_labels": [0, 1]}, line, {"step_labels": [0, 1, 2]}]),
    )
    assert proc.returncode == 1
    rows = outputs(proc)
    assert len(rows) == 3
    assert rows[0]["score"] == pytest.approx(0.5)
    assert rows[1]["error"].startswith("line 2: ")
    assert message in rows[1]["error"]
    assert rows[1]["line"] == 2
    assert rows[2]["score"] == pytest.approx(3 / 7)


def test_blank_line_in_the_middle_is_an_error_but_trailing_blank_lines_are_ignored(
    run_cli: RunCli,
) -> None:
    proc = run_cli(
        "reward", "structure", stdin='{"step_labels": [0, 1]}\n\n{"step_labels": [0]}\n\n\n'
    )
    rows = outputs(proc)
    assert len(rows) == 3
    assert "line 2: empty line" in rows[1]["error"]
    assert proc.returncode == 1


def test_labels_without_response_are_the_steps(run_cli: RunCli) -> None:
    proc = run_cli("reward", "structure", stdin=jsonl([{"step_labels": []}]))
    assert outputs(proc)[0]["num_steps"] == 0
    assert outputs(proc)[0]["score"] == 0.0


def test_variant_and_input_file(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(jsonl([{"step_labels": [0, 1, 2, 0]}]))
    full = outputs(run_cli("reward", "structure", "--input", str(path)))[0]["score"]
    c_only = outputs(run_cli("reward", "structure", "--input", str(path), "--variant", "c_only"))
    l_only = outputs(run_cli("reward", "structure", "--input", str(path), "--variant", "l_only"))
    assert (full, c_only[0]["score"], l_only[0]["score"]) == pytest.approx((1.0, 0.5, 0.5))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "/no/such/file.jsonl"], "--input: no such file"),
        (["--embedder", "openai"], "--embedding-url is required"),
        (["--max-steps", "0"], "--max-steps"),
        (["--clustering", "dbscan"], "dbscan"),
    ],
)
def test_bad_options_exit_2_with_a_one_line_message(
    run_cli: RunCli, args: list[str], message: str
) -> None:
    proc = run_cli("reward", "structure", *args, stdin=jsonl([{"step_labels": [0, 1]}]))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unreachable_embedding_server_fails_text_lines_not_label_lines(run_cli: RunCli) -> None:
    proc = run_cli(
        "reward",
        "structure",
        "--embedder",
        "openai",
        "--embedding-url",
        "http://127.0.0.1:9",
        "--embedding-model",
        "m",
        stdin=jsonl([{"response": THREE_STEPS}, {"step_labels": [0, 1]}]),
    )
    assert proc.returncode == 1
    rows = outputs(proc)
    assert "line 1: " in rows[0]["error"] and "127.0.0.1:9" in rows[0]["error"]
    assert rows[1]["score"] == pytest.approx(0.5)


def test_openai_embedder_against_a_local_server(run_cli: RunCli) -> None:
    from tests.support.embedding_server import running_embedding_server

    steps = "\n\n".join(f"step {i}" for i in range(9))
    with running_embedding_server(dim=16) as server:
        proc = run_cli(
            "reward",
            "structure",
            "--embedder",
            "openai",
            "--embedding-url",
            server.url,
            "--embedding-model",
            "hash",
            stdin=jsonl([{"response": f"<think>{steps}</think>"}] * 2),
        )
    assert proc.returncode == 0, proc.stderr
    rows = outputs(proc)
    assert rows[0] == rows[1]
    assert rows[0]["num_steps"] == 9 and rows[0]["num_nodes"] == 3


@pytest.mark.slow
def test_local_bundled_model_scores_sample_traces(run_cli: RunCli) -> None:
    from importlib import resources

    sample = resources.files("sarl.data").joinpath("sample_traces.jsonl").read_text()
    proc = run_cli("reward", "structure", stdin=sample)
    assert proc.returncode == 0, proc.stderr
    rows = outputs(proc)
    assert len(rows) == len(sample.splitlines())
    for row, src in zip(rows, sample.splitlines(), strict=True):
        assert 0.0 <= row["score"] <= 1.0
        assert row["num_steps"] == len(row["labels"])
        assert json.loads(src)["response"]
    assert rows[-1]["score"] == 0.0  # the single-step sample: degenerate map
