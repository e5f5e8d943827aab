"""Decomposition and strict yes/no verdicts through a real chat server; retries on bad replies."""

from __future__ import annotations

import pytest

from sarl.rewards.rlkd.chat import ChatClient, ChatEndpointSettings
from sarl.rewards.rlkd.gsrm import (
    GSRM,
    DecompositionError,
    VerdictError,
    load_prompt,
    parse_verdict,
)
from sarl.rewards.rlkd.steps import Step
from tests.sarl.rewards.rlkd.conftest import ScriptedModels, decomposition
from tests.support.chat_server import ChatServer


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("yes", True),
        ("No", False),
        (" YES.\n", True),
        ("**no**", False),
        ('"Yes"', True),
        ("[no]", False),
        ("<think>they differ... yes? no.</think>\nno", False),
        ("yes!", True),
        ("Yes, they match.", None),
        ("no, wait, yes", None),
        ("maybe", None),
        ("yes/no", None),
        ("", None),
        ("The answer is yes", None),
        ("yess", None),
        ("1", None),
    ],
)
def test_parse_verdict_is_strict(reply: str, verdict: bool | None) -> None:
    assert parse_verdict(reply) is verdict


def test_prompts_are_package_data_with_their_placeholders() -> None:
    assert "{reasoning_path}" in load_prompt("decompose") and "{problem}" in load_prompt(
        "decompose"
    )
    match = load_prompt("match")
    assert all(f"{{{k}}}" in match for k in ("teacher", "student", "field_description"))


def gsrm(server: ChatServer, parse_retries: int = 1) -> GSRM:
    c = ChatClient(ChatEndpointSettings(url=server.url, model="m", backoff_seconds=0))
    return GSRM(c, c, parse_retries=parse_retries, judge_max_tokens=4)


def test_decompose_sends_problem_and_path_and_parses(
    server: ChatServer, models: ScriptedModels
) -> None:
    models.decompose("x = {1}; so 2x = 2", decomposition("m/q/a"))
    assert gsrm(server).decompose("x = {1}; so 2x = 2", "Find 2x.") == [Step("m", "q", "a")]
    prompt = server.requests[0].messages[0]["content"]
    assert "Find 2x." in prompt and "x = {1}; so 2x = 2" in prompt  # braces kept verbatim


def test_a_reply_without_steps_is_reasked_with_a_reminder(
    server: ChatServer, models: ScriptedModels
) -> None:
    models.decompose("path", "Sorry, I can't.", decomposition("m/q/a"))
    g = gsrm(server)
    assert g.decompose("path") == [Step("m", "q", "a")]
    second = server.requests[1].messages
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert "No step was found" in second[2]["content"]
    assert g.stats().empty_decompositions == 1


def test_no_steps_after_all_retries_gives_an_empty_decomposition(
    server: ChatServer, models: ScriptedModels
) -> None:
    models.decompose("path", "nothing")
    g = gsrm(server, parse_retries=2)
    assert g.decompose("path") == []
    assert len(server.requests) == 3 and g.stats().empty_decompositions == 3


NO_META = "[Rationale 1]: plan\n[Sub-problem 1]: q1\n[Answer 1]: a1"  # meta label unknown


def test_steps_without_any_meta_reasoning_are_reasked_then_raise(
    server: ChatServer, models: ScriptedModels
) -> None:
    # Sub-problems and answers but never a meta-reasoning: Algorithm 1 would exit at the first
    # meta match of every sample (r = 0 everywhere) with nothing failing; it is an error.
    models.decompose("path", NO_META)
    g = gsrm(server, parse_retries=1)
    with pytest.raises(DecompositionError, match="no meta-reasoning field.*Rationale 1"):
        g.decompose("path")
    assert len(server.requests) == 2 and g.stats().empty_decompositions == 2


def test_a_meta_reasoning_in_a_later_reply_is_accepted(
    server: ChatServer, models: ScriptedModels
) -> None:
    models.decompose("path", NO_META, decomposition("m/q/a"))
    assert gsrm(server).decompose("path") == [Step("m", "q", "a")]


def test_match_asks_for_one_word_and_parses_it(server: ChatServer) -> None:
    g = gsrm(server)
    assert g.match("meta", "same plan", "same plan") is True
    assert g.match("answer", "x = 3", "x = 4") is False
    request = server.requests[1]
    assert request.body["max_tokens"] == 4
    assert "answer to the step's sub-problem" in request.messages[0]["content"]


def test_a_malformed_verdict_is_retried_then_accepted(
    server: ChatServer, models: ScriptedModels
) -> None:
    models.queue("a", "a", "Yes, they are the same.", "yes")
    g = gsrm(server)
    assert g.match("question", "a", "a") is True
    assert server.requests[1].messages[-1]["content"].startswith("That reply was not understood")
    assert g.stats().unparseable_verdicts == 1 and g.stats().verdict_failures == 0


def test_no_verdict_after_all_retries_raises(server: ChatServer, models: ScriptedModels) -> None:
    models.queue("a", "b", "perhaps", "it depends", "unclear")
    g = gsrm(server, parse_retries=1)
    with pytest.raises(VerdictError, match="no yes/no verdict on the meta field.*'perhaps'"):
        g.match("meta", "a", "b")
    assert len(server.requests) == 2
    assert g.stats().verdict_failures == 1
