"""The reward service over real HTTP, embedding through the embedding service (the real stack)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sarl.embedding.local import LocalEmbedder
from sarl.rewards.registry import reward_names
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.requests import parse_request, score_requests
from tests.services.conftest import Stack

pytestmark = pytest.mark.slow  # real service subprocesses (started once per session)


def _traces() -> list[str]:
    text = files("sarl").joinpath("data/sample_traces.jsonl").read_text(encoding="utf-8")
    return [json.loads(line)["response"] for line in text.splitlines() if line.strip()]


def _score(stack: Stack, body: Any, name: str = "structure") -> httpx.Response:
    return httpx.post(f"{stack.reward.url}/v1/rewards/{name}", json=body, timeout=60)


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_structure_scores_equal_in_process_scoring(
    stack: Stack, local_embedder: LocalEmbedder
) -> None:
    items = [{"response": r} for r in _traces()]
    response = _score(stack, {"requests": items})
    assert response.status_code == 200
    results = response.json()["results"]
    config = StructureRewardConfig()
    expected = score_requests([parse_request(i, config) for i in items], config, local_embedder)
    assert len(results) == len(expected) > 3
    for got, want in zip(results, expected, strict=True):
        assert list(got) == [
            "score", "clustering", "path_length", "num_steps", "num_nodes", "num_edges", "labels",
        ]  # fmt: skip
        assert got["labels"] == list(want.labels)
        assert got["score"] == pytest.approx(want.score, abs=1e-12)


def test_labels_only_and_per_item_errors_keep_order(stack: Stack) -> None:
    body = {
        "requests": [
            {"step_labels": [0, 1, 0, 2]},
            {"response": 5},
            {"step_labels": [0, -1]},
            {"step_embeddings": [[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]]},
            "not an object",
            {"response": "<think>a\n\nb</think>", "step_labels": [0]},
        ],
        "settings": {"variant": "c_only"},
    }
    results = _score(stack, body).json()["results"]
    assert results[0]["labels"] == [0, 1, 0, 2] and results[0]["num_nodes"] == 3
    assert results[1] == {"error": "requests[1]: response: expected a string, got 5"}
    assert results[2]["error"].startswith("requests[2]: step_labels[1]:")
    assert results[3]["num_steps"] == 3
    assert results[4]["error"].startswith("requests[4]: expected a JSON object")
    assert results[5]["error"].startswith("requests[5]: step_labels: has 1 entries")
    assert results[0]["score"] == pytest.approx(results[0]["clustering"] / 2)  # c_only


def test_other_registered_rewards_score_samples(stack: Stack) -> None:
    body = {
        "requests": [
            {"response": "so \\boxed{42}", "ground_truth": "42"},
            {"response": "no answer", "ground_truth": 42},
            {"response": "\\boxed{41}"},
        ],
        "settings": {"correct_score": 2.0},
    }
    results = _score(stack, body, "ground_truth").json()["results"]
    assert results[0] == {"score": 2.0, "has_answer": 1.0, "correct": 1.0}
    assert results[1] == {"score": 0.0, "has_answer": 0.0, "correct": 0.0}
    assert results[2]["error"].startswith("requests[2]: ValueError:")
    assert "no ground truth" in results[2]["error"]


def test_group_rewards_score_items_sharing_a_group_together(stack: Stack) -> None:
    if "ttrl" not in reward_names():
        pytest.skip("the ttrl reward is not registered in this checkout")
    answers = [("a", 1), ("b", 7), ("a", 1), ("a", 2), ("b", 8), ("b", 7)]
    body = {"requests": [{"response": f"\\boxed{{{x}}}", "group": g} for g, x in answers]}
    results = _score(stack, body, "ttrl").json()["results"]
    assert [r["score"] for r in results] == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert [r["majority_ratio"] for r in results] == pytest.approx([2 / 3] * 6)


def test_list_rewards(stack: Stack) -> None:
    assert {"structure", "ground_truth"} <= set(
        httpx.get(f"{stack.reward.url}/v1/rewards").json()["rewards"]
    )


@pytest.mark.parametrize("name", ["nope", "sarl.rewards.ground_truth:GroundTruthReward"])
def test_unknown_reward_is_404_listing_known(stack: Stack, name: str) -> None:
    response = _score(stack, {"requests": []}, name)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["param"] == "name"
    known = error["message"].split("known: ")[1].split(", ")
    assert {"ground_truth", "structure"} <= set(known)


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({}, "requests", "requests: required"),
        ({"requests": {"response": "x"}}, "requests", "a list of items"),
        ({"requests": [], "setting": {}}, "setting", "unknown field 'setting'"),
        ({"requests": [], "settings": [1]}, "settings", "an object"),
        ({"requests": [], "settings": {"max_steps": 0}}, "settings.max_steps", "greater than"),
        ({"requests": [], "settings": {"colour": 1}}, "settings.colour", "not settable per"),
        (
            {"requests": [], "settings": {"embedder": {"url": "http://x"}}},
            "settings.embedder",
            "not settable per request",
        ),
        ([], None, "JSON object"),
    ],
)
def test_whole_request_errors_are_400_naming_the_field(
    stack: Stack, body: Any, param: str | None, fragment: str
) -> None:
    response = _score(stack, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and fragment in error["message"]


def test_oversize_requests_are_413(stack: Stack) -> None:
    url = f"{stack.reward.url}/v1/rewards/structure"
    with httpx.Client(timeout=30) as client:
        declared = client.post(url, json={"requests": [{"response": "x" * 20_000}] * 6})
        streamed = client.post(url, content=(b" " * 30_000 for _ in range(5)))  # chunked
        too_many = client.post(url, json={"requests": [{"step_labels": [0]}] * 65})
        after = client.post(url, json={"requests": [{"step_labels": [0]}]})
    assert declared.status_code == streamed.status_code == too_many.status_code == 413
    assert "100000 bytes" in declared.json()["error"]["message"]
    assert too_many.json()["error"]["param"] == "requests"
    assert after.status_code == 200


def test_metrics_count_requests_errors_and_embedding_calls(stack: Stack) -> None:
    before = _metrics(stack.reward.url)
    assert _score(stack, {"requests": [{"response": "<think>p\n\nq\n\nr</think>"}]}).is_success
    assert _score(stack, {"requests": [{"response": 1}]}).is_success  # one item error
    assert _score(stack, {"requests": "x"}).status_code == 400
    after = _metrics(stack.reward.url)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("sarl_reward_requests_total", reward="structure", status="200") == 2
    assert delta("sarl_reward_requests_total", reward="structure", status="400") == 1
    assert delta("sarl_reward_errors_total", reward="structure", type="invalid_request_error") == 1
    assert delta("sarl_reward_item_errors_total", reward="structure") == 1
    assert delta("sarl_reward_items_total", reward="structure") == 1
    assert delta("sarl_reward_request_seconds_count", reward="structure") == 3
    assert delta("sarl_reward_embedding_calls_total", outcome="ok") == 1
    assert delta("sarl_reward_embedding_texts_total") == 3
    assert delta("sarl_reward_embedding_seconds_count") == 1
    assert after[("sarl_reward_in_flight", ())] == 0
    assert after[("sarl_reward_queued", ())] == 0
