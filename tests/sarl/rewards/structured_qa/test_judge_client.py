"""ChatJudge against a real local OpenAI-compatible chat server on loopback, with recorded replies:
normal scoring, retries then success, and the neutral outcome when the judge cannot answer."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from sarl.rewards.structured_qa.judge import (
    API_KEY_ENV,
    ChatJudge,
    JudgeOutcome,
    JudgeRequest,
    JudgeStats,
    PairJudgement,
)
from sarl.rewards.structured_qa.parsing import QAPair
from tests.support.chat_server import ChatReply, ChatRequest, ChatServer, running_chat_server

PAIRS = (QAPair("How many eggs remain?", "16 - 7 = 9."), QAPair("What do 9 eggs earn?", "18"))
GOOD = json.dumps(
    {
        "pairs": [
            {"pair": 1, "relevance": 1, "quality": 1},
            {"pair": 2, "relevance": 0, "quality": 1},
        ]
    }
)
GOOD_REWARD = (1.0 + 0.5) / 2  # eq. (3): mean of (1+1)/2 and (0+1)/2
ONE_PAIR = json.dumps({"pairs": [{"pair": 1, "relevance": 1, "quality": 1}]})


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with running_chat_server() as srv:
        yield srv


def make_judge(url: str, **overrides: Any) -> ChatJudge:
    # Tiny backoffs keep retry tests fast; the retry *count* is what they check.
    settings: dict[str, Any] = {
        "model": "judge-model",
        "backoff_s": 0.01,
        "max_backoff_s": 0.02,
        "timeout_s": 5.0,
    }
    return ChatJudge(base_url=url, **(settings | overrides))


def judge_once(judge: ChatJudge, problem: str = "Janet's ducks.") -> JudgeOutcome:
    return asyncio.run(judge.ajudge(problem, PAIRS))


def test_scores_a_trajectory_with_one_request(server: ChatServer) -> None:
    server.set_script([GOOD])
    judge = make_judge(server.url)
    outcome = judge_once(judge)
    assert outcome == JudgeOutcome(
        GOOD_REWARD, (PairJudgement(1, 1), PairJudgement(0, 1)), failed=False, attempts=1
    )
    [request] = server.requests
    assert request.model == "judge-model"
    assert request.body["temperature"] == 0
    [message] = request.messages
    assert message["role"] == "user"
    assert "Janet's ducks." in message["content"]
    assert "ASK: What do 9 eggs earn?\nREFLECT: 18" in message["content"]
    assert judge.stats() == JudgeStats(requests=1, retries=0, judged=1, failures=0)


@pytest.mark.parametrize(
    "failure",
    [
        ChatReply.error(500),
        ChatReply.error(503, "overloaded"),
        ChatReply.error(429, retry_after=0),
        ChatReply.error(408),
        ChatReply("I'd rather not answer in JSON."),  # malformed judgement
        ChatReply('```json\n{"pairs": [{"pair": 1, "relevance": 1, "quality": 1}]}\n```'),
        ChatReply('{"pairs": [{"relevance": 3, "quality": 1}, {"relevance": 0, "quality": 0}]}'),
        ChatReply.raw("<html>Bad gateway</html>"),  # 200 with a non-JSON envelope
        ChatReply.raw('{"choices": []}'),
        ChatReply.dropped(),
    ],
)
def test_transient_failures_are_retried_then_succeed(
    server: ChatServer, failure: ChatReply
) -> None:
    server.set_script([failure, failure, GOOD])
    judge = make_judge(server.url, max_retries=2)
    outcome = judge_once(judge)
    assert (outcome.reward, outcome.failed, outcome.attempts) == (GOOD_REWARD, False, 3)
    assert judge.stats() == JudgeStats(requests=3, retries=2, judged=1, failures=0)


def test_a_hung_request_times_out_and_is_retried(server: ChatServer) -> None:
    server.set_script([ChatReply.delayed(3.0, GOOD), GOOD])
    outcome = judge_once(make_judge(server.url, timeout_s=0.2))
    assert (outcome.reward, outcome.failed, outcome.attempts) == (GOOD_REWARD, False, 2)


def test_retry_after_is_honoured_up_to_the_cap(server: ChatServer) -> None:
    server.set_script([ChatReply.error(429, retry_after=30), GOOD])
    outcome = judge_once(make_judge(server.url, max_backoff_s=0.05))  # not 30 s
    assert outcome.attempts == 2 and not outcome.failed


def test_persistent_failure_gives_the_neutral_outcome_and_is_counted(
    server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.set_script(lambda request: ChatReply.error(500, "judge is down"))
    judge = make_judge(server.url, max_retries=3)
    with caplog.at_level(logging.WARNING, logger="sarl.rewards.structured_qa.judge"):
        outcome = judge_once(judge)
    assert (outcome.reward, outcome.judgements, outcome.failed, outcome.attempts) == (
        0.0,
        (),
        True,
        4,
    )
    assert outcome.error is not None
    assert re.search(r"answered HTTP 500: judge is down after 4 attempts", outcome.error)
    assert judge.stats() == JudgeStats(requests=4, retries=3, judged=0, failures=1)
    assert len(server.requests) == 4
    assert "neutral outcome R_judge = 0 (judge_failed)" in caplog.text


def test_persistently_malformed_replies_give_the_neutral_outcome(server: ChatServer) -> None:
    server.set_script(lambda request: ONE_PAIR)  # wrong pair count, every time
    judge = make_judge(server.url, max_retries=1)
    outcome = judge_once(judge)
    assert outcome.failed and outcome.reward == 0.0 and outcome.attempts == 2
    assert outcome.error is not None and "1 judgements for 2 pairs" in outcome.error
    assert judge.stats().failures == 1


def test_client_errors_are_not_retried(server: ChatServer) -> None:
    server.set_script(lambda request: ChatReply.error(404, "model 'judge-model' not found"))
    judge = make_judge(server.url, max_retries=3)
    outcome = judge_once(judge)
    assert outcome.failed and outcome.attempts == 1
    assert outcome.error is not None and "HTTP 404: model 'judge-model' not found" in outcome.error
    assert len(server.requests) == 1


def test_an_unreachable_judge_gives_the_neutral_outcome() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = make_judge(f"http://127.0.0.1:{port}", max_retries=1)
    outcome = judge_once(judge)
    assert outcome.failed and outcome.attempts == 2
    assert outcome.error is not None and "request failed (ConnectError" in outcome.error


def reply_by_problem(request: ChatRequest) -> ChatReply:
    """Score every pair with the number in the problem text; problem 'fail' always fails."""
    match = re.search(r"PROBLEM:\nproblem (-?\d|fail)", request.text)
    if match is None or match.group(1) == "fail":
        return ChatReply.error(500, "scripted failure")
    score = int(match.group(1))
    entries = [{"pair": i, "relevance": score, "quality": score} for i in (1, 2)]
    return ChatReply(json.dumps({"pairs": entries}), delay_s=0.1)


def test_a_batch_is_judged_concurrently_within_the_bound(server: ChatServer) -> None:
    server.set_script(reply_by_problem)
    judge = make_judge(server.url, max_concurrency=3, max_retries=1)
    problems = ["problem 1", "problem -1", "problem 0", "problem fail", "problem 1", "problem 0"]
    requests = [JudgeRequest(p, PAIRS) for p in problems]
    requests.insert(2, JudgeRequest("problem 1", ()))  # no pairs: no call
    outcomes = asyncio.run(judge.ajudge_many(requests))
    assert [o.reward for o in outcomes] == [1.0, -1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert [o.failed for o in outcomes] == [False, False, False, False, True, False, False]
    assert outcomes[2].attempts == 0
    assert 2 <= server.stats.max_in_flight <= 3
    assert judge.stats() == JudgeStats(requests=7, retries=1, judged=5, failures=1)


def test_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    with running_chat_server([GOOD], api_key="s3cret") as srv:
        judge = make_judge(srv.url)
        assert "s3cret" not in repr(judge)
        assert not judge_once(judge).failed
    monkeypatch.delenv(API_KEY_ENV)
    with running_chat_server([GOOD], api_key="s3cret") as srv:
        outcome = judge_once(make_judge(srv.url))
        assert outcome.failed and outcome.error is not None and "HTTP 401" in outcome.error
