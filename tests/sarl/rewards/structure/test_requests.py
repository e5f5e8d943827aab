"""Scoring requests (the CLI's and the reward service's contract): validation of extreme values
and per-request isolation (issue 12)."""

from __future__ import annotations

import numpy as np
import pytest

from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.requests import (
    RequestError,
    ScoreRequest,
    ScoringFailure,
    embed_requests,
    parse_request,
    score_isolated,
    score_requests,
)

CONFIG = StructureRewardConfig()
FAR = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0.01, 0], [0, 1, 0.01], [0.01, 0, 1], [1, 0, 0.01]]


@pytest.mark.parametrize(
    ("value", "shown"),
    [(10**400, "1000000000"), (float("inf"), "Infinity"), (True, "true"), ("1", "'1'")],
)
def test_embedding_values_must_be_finite_float64(value: object, shown: str) -> None:
    with pytest.raises(RequestError, match=r"step_embeddings\[1\]\[0\]: expected a finite") as e:
        parse_request({"step_embeddings": [[1, 0], [value, 1]]}, CONFIG)
    assert shown in str(e.value)


def test_deeply_nested_values_are_shown_briefly() -> None:
    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(RequestError, match="response: expected a string, got a list"):
        parse_request({"response": nested}, CONFIG)


@pytest.mark.parametrize("scale", [1e200, 1e-300, 5e-324 / 1e-300])
def test_extreme_but_finite_embeddings_score_like_unit_ones(scale: float) -> None:
    unit = parse_request({"step_embeddings": FAR}, CONFIG)
    extreme = parse_request({"step_embeddings": [[x * scale for x in r] for r in FAR]}, CONFIG)
    [a, b] = score_requests([unit, extreme], CONFIG, None)
    assert a.to_dict() == b.to_dict()
    assert a.labels == (0, 1, 2, 0, 1, 2, 0)


def test_one_failing_request_fails_alone() -> None:
    good = parse_request({"step_embeddings": FAR}, CONFIG)
    labels = parse_request({"step_labels": [0, 1, 2, 0]}, CONFIG)  # no clustering
    broken = ScoreRequest(embeddings=np.array([[np.nan, 1.0], [1.0, 0.0]]))  # skipped validation
    with pytest.raises(ValueError, match="non-finite"):
        score_requests([good, broken], CONFIG, None)  # the batch call fails as a whole ...
    out = score_isolated([good, broken, labels], CONFIG)  # ... the isolated one does not
    assert isinstance(out[1], ScoringFailure) and "non-finite" in out[1].message
    assert out[0] == score_requests([good], CONFIG, None)[0]
    assert out[2] == score_requests([labels], CONFIG, None)[0]


def test_text_requests_are_embedded_in_one_call() -> None:
    calls: list[int] = []

    class Embedder:
        def embed(self, texts: list[str]) -> np.ndarray:
            calls.append(len(texts))
            return np.eye(4, dtype=np.float32)[[0, 1, 0, 2, 3][: len(texts)]]

    text = [parse_request({"response": "<think>a\n\nb</think>"}, CONFIG)]
    text.append(parse_request({"response": "<think>c\n\nd\n\ne</think>"}, CONFIG))
    embedded = embed_requests([*text, parse_request({"step_labels": [0]}, CONFIG)], Embedder())
    assert calls == [5]
    assert [e.embeddings.shape if e.embeddings is not None else None for e in embedded] == [
        (2, 4),
        (3, 4),
        None,
    ]
    with pytest.raises(RuntimeError, match="embedded first"):
        score_isolated(text, CONFIG)  # a caller's bug, not a request's failure
