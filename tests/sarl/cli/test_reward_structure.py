"""The structure reward's JSON Lines contract: JSON Lines in, one JSON object per line out — by
its name ``sarl reward score structure`` and by the hidden old name ``sarl reward structure``
(issue 40 item 7: one name for each thing). Each contract test runs against both names; the
old name's options are the new name's ``--set`` settings (:data:`OPTIONS`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sarl.rewards.structure.result import OUTPUT_KEYS
from tests.sarl.cli.conftest import RunCli, jsonl, outputs

NEW = ("reward", "score", "structure")
OLD = ("reward", "structure")
#: The keys of a scored line by each name: the new name adds ``degenerate`` (a component of the
#: reward, as for every reward ``score`` prints) and keeps the old name's keys.
KEYS = {
    NEW: [
        "score",
        "clustering",
        "path_length",
        "num_steps",
        "num_nodes",
        "num_edges",
        "degenerate",
        "labels",
    ],
    OLD: list(OUTPUT_KEYS),
}


#: The new name's setting for each old flag that is not spelled alike.
SETTING = {
    "embedder": "embedder.kind",
    "embedding_url": "embedder.url",
    "embedding_model": "embedder.model",
}


def options(name: tuple[str, ...], **values: str) -> list[str]:
    """The old name's flags (``--max-steps 0``) or the new name's settings (``--set
    max_steps=0``) for the same values."""
    if name == OLD:
        return [arg for k, v in values.items() for arg in (f"--{k.replace('_', '-')}", v)]
    return [arg for k, v in values.items() for arg in ("--set", f"{SETTING.get(k, k)}={v}")]


both = pytest.mark.parametrize("name", [NEW, OLD], ids=["score-structure", "old-name"])

THREE_STEPS = "<think>a\n\nb\n\nc</think>answer"


@both
def test_labels_only_lines_need_no_model_and_follow_the_paper(
    run_cli: RunCli, name: tuple[str, ...]
) -> None:
    proc = run_cli(
        *name,
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
    assert [list(r) for r in rows] == [KEYS[name]] * 3
    assert rows[0]["score"] == pytest.approx(3 / 7)
    assert rows[1]["score"] == pytest.approx(1.0)
    assert rows[1]["num_edges"] == 6
    assert {k: rows[2][k] for k in OUTPUT_KEYS} == {
        "score": 0.0,
        "clustering": 0.0,
        "path_length": None,
        "num_steps": 3,
        "num_nodes": 1,
        "num_edges": 0,
        "labels": [0, 0, 0],
    }


@both
def test_step_embeddings_are_clustered(run_cli: RunCli, name: tuple[str, ...]) -> None:
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
    proc = run_cli(*name, stdin=jsonl([{"step_embeddings": far}]))
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
@both
def test_a_malformed_line_reports_its_number_and_others_still_score(
    run_cli: RunCli, line: object, message: str, name: tuple[str, ...]
) -> None:
    proc = run_cli(
        *name,
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


@both
def test_blank_line_in_the_middle_is_an_error_but_trailing_blank_lines_are_ignored(
    run_cli: RunCli, name: tuple[str, ...]
) -> None:
    proc = run_cli(*name, stdin='{"step_labels": [0, 1]}\n\n{"step_labels": [0]}\n\n\n')
    rows = outputs(proc)
    assert len(rows) == 3
    assert "line 2: empty line" in rows[1]["error"]
    assert proc.returncode == 1


@both
def test_labels_without_response_are_the_steps(run_cli: RunCli, name: tuple[str, ...]) -> None:
    proc = run_cli(*name, stdin=jsonl([{"step_labels": []}]))
    assert outputs(proc)[0]["num_steps"] == 0
    assert outputs(proc)[0]["score"] == 0.0


@both
def test_variant_and_input_file(run_cli: RunCli, tmp_path: Path, name: tuple[str, ...]) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(jsonl([{"step_labels": [0, 1, 2, 0]}]))
    full = outputs(run_cli(*name, "--input", str(path)))[0]["score"]
    c_only = outputs(run_cli(*name, "--input", str(path), *options(name, variant="c_only")))
    l_only = outputs(run_cli(*name, "--input", str(path), *options(name, variant="l_only")))
    assert (full, c_only[0]["score"], l_only[0]["score"]) == pytest.approx((1.0, 0.5, 0.5))


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        (OLD, ["--input", "/no/such/file.jsonl"], "--input: no such file"),
        (OLD, ["--embedder", "openai"], "--embedding-url is required"),
        (OLD, ["--max-steps", "0"], "--max-steps"),
        (OLD, ["--clustering", "dbscan"], "dbscan"),
        (NEW, ["--input", "/no/such/file.jsonl"], "--input: no such file"),
        (NEW, options(NEW, embedder="openai"), "embedder.url: required"),
        (NEW, options(NEW, max_steps="0"), "setting 'max_steps'=0"),
        (NEW, options(NEW, clustering="dbscan"), "dbscan"),
        (NEW, ["--set", "embedder=openai"], "setting 'embedder'"),
    ],
)
def test_bad_options_exit_2_with_a_one_line_message(
    run_cli: RunCli, name: tuple[str, ...], args: list[str], message: str
) -> None:
    proc = run_cli(*name, *args, stdin=jsonl([{"step_labels": [0, 1]}]))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@both
def test_unreachable_embedding_server_fails_text_lines_not_label_lines(
    run_cli: RunCli, name: tuple[str, ...]
) -> None:
    proc = run_cli(
        *name,
        *options(name, embedder="openai", embedding_url="http://127.0.0.1:9", embedding_model="m"),
        stdin=jsonl([{"response": THREE_STEPS}, {"step_labels": [0, 1]}]),
    )
    assert proc.returncode == 1
    rows = outputs(proc)
    assert "line 1: " in rows[0]["error"] and "127.0.0.1:9" in rows[0]["error"]
    assert rows[1]["score"] == pytest.approx(0.5)


@both
def test_openai_embedder_against_a_local_server(run_cli: RunCli, name: tuple[str, ...]) -> None:
    from tests.support.embedding_server import running_embedding_server

    steps = "\n\n".join(f"step {i}" for i in range(9))
    with running_embedding_server(dim=16) as server:
        proc = run_cli(
            *name,
            *options(name, embedder="openai", embedding_url=server.url, embedding_model="hash"),
            stdin=jsonl([{"response": f"<think>{steps}</think>"}] * 2),
        )
    assert proc.returncode == 0, proc.stderr
    rows = outputs(proc)
    assert rows[0] == rows[1]
    assert rows[0]["num_steps"] == 9 and rows[0]["num_nodes"] == 3


@pytest.mark.slow
@both
def test_local_bundled_model_scores_sample_traces(run_cli: RunCli, name: tuple[str, ...]) -> None:
    from importlib import resources

    sample = resources.files("sarl.data").joinpath("sample_traces.jsonl").read_text()
    proc = run_cli(*name, stdin=sample)
    assert proc.returncode == 0, proc.stderr
    rows = outputs(proc)
    assert len(rows) == len(sample.splitlines())
    for row, src in zip(rows, sample.splitlines(), strict=True):
        assert 0.0 <= row["score"] <= 1.0
        assert row["num_steps"] == len(row["labels"])
        assert json.loads(src)["response"]
    assert rows[-1]["score"] == 0.0  # the single-step sample: degenerate map


# --- one name for each thing (issue 40 item 7) ---------------------------------------------------


def test_the_old_name_is_hidden_and_says_the_new_one(run_cli: RunCli) -> None:
    listing = run_cli("reward", "--help")
    assert "score" in listing.stdout and "structure" not in listing.stdout
    proc = run_cli(*OLD, stdin=jsonl([{"step_labels": [0, 1, 2]}]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1 and "`sarl reward score structure`" in proc.stderr
    new = run_cli(*NEW, stdin=jsonl([{"step_labels": [0, 1, 2]}]))
    assert "sarl reward structure" not in new.stderr


@pytest.mark.parametrize(
    "values",
    [
        {"clustering": "hdbscan"},
        {"variant": "l_only", "degenerate_score": "0.25"},
        {"delimiter": "\\n", "max_steps": "2"},
    ],
)
def test_the_old_options_are_the_new_names_settings(
    run_cli: RunCli, values: dict[str, str]
) -> None:
    """Every line, every value: the new name with ``--set`` scores as the old name did with its
    flags (the delimiter's escapes decoded by the old flag, by YAML's double quotes here)."""
    far = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0.01, 0], [0, 1, 0.01], [0.01, 0, 1]]
    lines = [{"step_embeddings": far}, {"step_labels": [0, 0, 0]}, {"step_labels": [0, 1, 2, 0]}]
    lines += [{"response": "<think>a\nb</think>", "step_labels": [0, 1]}]
    new_values = {k: (f'"{v}"' if k == "delimiter" else v) for k, v in values.items()}
    old = outputs(run_cli(*OLD, *options(OLD, **values), stdin=jsonl(lines)))
    new = outputs(run_cli(*NEW, *options(NEW, **new_values), stdin=jsonl(lines)))
    assert [row if "error" in row else {k: row[k] for k in OUTPUT_KEYS} for row in new] == old
    assert old != outputs(run_cli(*OLD, stdin=jsonl(lines)))  # the values changed something


def test_maps_of_labelled_lines_are_drawn_with_their_labels(
    run_cli: RunCli, tmp_path: Path
) -> None:
    lines = [{"step_labels": [0, 1, 2, 0], "id": "chain"}, {"step_embeddings": [[1, 0], [0, 1]]}]
    (tmp_path / "in.jsonl").write_text(jsonl(lines))
    proc = run_cli(*NEW, "-i", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "o").glob("*.png")) == ["line-1.png", "line-2.png"]
    rows = [json.loads(x) for x in (tmp_path / "o" / "scores.jsonl").read_text().splitlines()]
    assert rows[0]["labels"] == [0, 1, 2, 0]
