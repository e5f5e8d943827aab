"""The ``rlkd`` reward end to end: scripted decomposer/judge on a real loopback chat server."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sarl.integrations.trl import make_trl_reward
from sarl.rewards.base import Sample
from sarl.rewards.registry import RewardConfigError, create_reward, get_reward_class
from sarl.rewards.rlkd.reward import RLKDReward, RLKDRewardSettings, teacher_steps_payload
from sarl.rewards.rlkd.steps import Step
from tests.sarl.rewards.rlkd.conftest import (
    ScriptedModels,
    decompose_requests,
    decomposition,
    match_requests,
    reference_decomposition,
)
from tests.support.chat_server import ChatReply, ChatServer, running_chat_server

TEACHER = "teacher path"


def reward(server: ChatServer, **settings: Any) -> RLKDReward:
    endpoint = {
        "url": server.url,
        "model": "m",
        "timeout_seconds": 0.3,
        "max_retries": 1,
        "backoff_seconds": 0,
    }
    built = create_reward("rlkd", {"decomposer": endpoint, "outcome": None, **settings})
    assert isinstance(built, RLKDReward)
    return built


def sample(response: str, teacher: Any = TEACHER, truth: str | None = None) -> Sample:
    return Sample(response, prompt="Solve it.", ground_truth=truth, extra={"teacher": teacher})


@pytest.fixture
def scripted(models: ScriptedModels) -> ScriptedModels:
    models.decompose(TEACHER, decomposition("m1/q1/a1", "m2/q2/a2", "m3/q3/a3"))
    models.decompose("same", decomposition("m1/q1/a1", "m2/q2/a2", "m3/q3/a3"))
    models.decompose("penalised", decomposition("m1/qX/aX", "m2/q2/aY", "mZ/q3/a3"))
    models.decompose("off", decomposition("mX/q1/a1", "m2/q2/a2"))
    return models


def test_registered_with_typed_settings() -> None:
    assert get_reward_class("rlkd") is RLKDReward
    with pytest.raises(RewardConfigError, match="decomposer"):
        create_reward("rlkd", {})
    endpoint = {"url": "http://127.0.0.1:1", "model": "m"}
    with pytest.raises(RewardConfigError, match="outcome"):
        create_reward("rlkd", {"decomposer": endpoint, "outcome": "rlkd"})
    with pytest.raises(RewardConfigError, match="unknown name 'nope'"):
        create_reward("rlkd", {"decomposer": endpoint, "outcome": "nope"})
    with pytest.raises(RewardConfigError, match="structure_weight"):
        create_reward("rlkd", {"decomposer": endpoint, "structure_weight": -1})


def test_algorithm_1_traces_over_http(server: ChatServer, scripted: ScriptedModels) -> None:
    r = reward(server)
    group = [sample("same"), sample("penalised"), sample("off"), sample("  ")]
    out = r.score_groups([group])[0]
    # same: 1 + 1 + 1; penalised: 0.5*0.5 (Q and A) + 0.5 (A) then exit; off: exit at once
    assert [o.score for o in out] == [3.0, 0.75, 0.0, 0.0]
    c = [o.components for o in out]
    assert [x["matched_steps"] for x in c] == [3.0, 2.0, 0.0, 0.0]
    assert [x["early_exit"] for x in c] == [0.0, 1.0, 1.0, 0.0]
    assert [x["judge_calls"] for x in c] == [9.0, 7.0, 1.0, 0.0]
    assert [x["student_steps"] for x in c] == [3.0, 3.0, 2.0, 0.0]
    assert all(x["teacher_steps"] == 3.0 and x["failed"] == 0.0 for x in c)
    assert all(math.isnan(x["outcome"]) for x in c)
    # the teacher is decomposed once for the group; the blank response is never sent
    assert sorted(decompose_requests(server)) == sorted([TEACHER, "same", "penalised", "off"])
    assert ("m3", "mZ") in match_requests(server) and ("mX", "m3") not in match_requests(server)
    r.close()


def test_only_the_reasoning_is_decomposed(server: ChatServer, scripted: ScriptedModels) -> None:
    # The reference sends split('</think>')[0] of the student's and the teacher's text.
    r = reward(server, outcome="ground_truth")
    teacher = f"{TEACHER}</think>So the answer is \\boxed{{4}}."
    group = [
        sample("same</think>The answer is \\boxed{4}.", teacher=teacher, truth="4"),
        sample("<think>off</think>\\boxed{5}</think>tail", teacher=teacher, truth="4"),
        sample("</think>only an answer \\boxed{4}", teacher=teacher, truth="4"),
    ]
    scripted.decompose("<think>off", decomposition("mX/q1/a1"))
    out = r.score_groups([group])[0]
    assert [o.score for o in out] == [3.0 + 1.0, 0.0 + 0.0, 0.0 + 1.0]
    assert sorted(decompose_requests(server)) == sorted([TEACHER, "same", "<think>off"])


def test_an_empty_teacher_reasoning_is_a_failure(server: ChatServer) -> None:
    out = reward(server).score_groups([[sample("same", teacher="</think>\\boxed{4}")]])[0]
    assert math.isnan(out[0].score) and out[0].components["failed"] == 1.0
    assert decompose_requests(server) == []


@pytest.mark.parametrize(
    "labels",
    [("Meat-reasoning", "Sub-problem", "Answer"), ("sub-think", "Query", "Answer")],
    ids=["prompt examples", "system prompt"],
)
def test_a_decomposer_trained_with_the_reference_recipe(
    server: ChatServer, models: ScriptedModels, labels: tuple[str, str, str]
) -> None:
    # Both label sets of xsc1234/RLKD's GSRM training data score like the prompt's own layout.
    models.decompose(TEACHER, reference_decomposition(labels, "m1/q1/a1", "m2/q2/a2", "m3/q3/a3"))
    models.decompose("same", reference_decomposition(labels, "m1/q1/a1", "m2/q2/a2", "m3/q3/a3"))
    models.decompose(
        "penalised", reference_decomposition(labels, "m1/qX/aX", "m2/q2/aY", "mZ/q3/a3")
    )
    out = reward(server).score_groups([[sample("same"), sample("penalised")]])[0]
    assert [o.score for o in out] == [3.0, 0.75]
    assert all(o.components["failed"] == 0.0 for o in out)


def test_an_unknown_meta_reasoning_label_is_flagged_not_scored_zero(
    server: ChatServer, models: ScriptedModels
) -> None:
    layout = ("Rationale", "Sub-problem", "Answer")  # a layout whose meta label is not known
    models.decompose(TEACHER, reference_decomposition(layout, "m1/q1/a1", "m2/q2/a2"))
    models.decompose("same", reference_decomposition(layout, "m1/q1/a1", "m2/q2/a2"))
    r = reward(server, parse_retries=0)
    out = r.score_groups([[sample("same")]])[0][0]
    assert math.isnan(out.score) and out.components["failed"] == 1.0
    given = teacher_steps_payload([Step("m1", "q1", "a1")])  # the student side fails the same way
    out = r.score_groups([[sample("same", teacher=given)]])[0][0]
    assert math.isnan(out.score) and out.components["failed"] == 1.0
    assert r.stats().failed_samples == 2


def test_outcome_is_combined_by_weights(server: ChatServer, scripted: ScriptedModels) -> None:
    scripted.decompose("same \\boxed{4}", decomposition("m1/q1/a1", "m2/q2/a2", "m3/q3/a3"))
    r = reward(server, outcome="ground_truth", structure_weight=0.5, outcome_weight=2.0)
    out = r.score_groups([[sample("same \\boxed{4}", truth="4"), sample("off", truth="4")]])[0]
    assert [o.score for o in out] == [0.5 * 3.0 + 2.0 * 1.0, 0.0]
    assert [o.components["outcome"] for o in out] == [1.0, 0.0]


def test_normalised_by_teacher_steps(server: ChatServer, scripted: ScriptedModels) -> None:
    out = reward(server, normalize="teacher_steps").score_groups([[sample("penalised")]])[0]
    assert out[0].score == pytest.approx(0.75 / 3)


def test_teacher_decompositions_are_cached_across_calls(
    server: ChatServer, scripted: ScriptedModels
) -> None:
    r = reward(server)
    r.score_groups([[sample("same")], [sample("off")]])  # two groups, one teacher
    r.score_groups([[sample("penalised")]])
    assert decompose_requests(server).count(TEACHER) == 1
    stats = r.stats()
    assert stats.teacher_decompositions == 1 and stats.teacher_cache_hits == 1
    assert stats.samples == 3 and stats.failed_samples == 0


def test_a_pre_decomposed_teacher_is_used_as_is(
    server: ChatServer, scripted: ScriptedModels
) -> None:
    given = teacher_steps_payload([Step("m1", "q1", "a1"), Step("m2", "q2", "a2")])
    out = reward(server).score_groups([[sample("same", teacher=given)]])[0]
    assert out[0].score == 2.0 and out[0].components["teacher_steps"] == 2.0
    assert TEACHER not in decompose_requests(server)


@pytest.mark.parametrize("teacher", [None, "", 3, []])
def test_a_missing_teacher_names_the_column(server: ChatServer, teacher: Any) -> None:
    extra = {} if teacher is None else {"teacher": teacher}
    with pytest.raises(ValueError, match="no teacher in extra\\['teacher'\\]"):
        reward(server).score_groups([[Sample("x", prompt="p", extra=extra)]])


def test_student_without_steps_scores_zero_not_failure(
    server: ChatServer, scripted: ScriptedModels
) -> None:
    scripted.decompose("gibberish", "asdf qwer")
    out = reward(server, parse_retries=0).score_groups([[sample("gibberish")]])[0]
    assert out[0].score == 0.0 and out[0].components["failed"] == 0.0


def test_teacher_without_steps_fails_the_whole_group(
    server: ChatServer, scripted: ScriptedModels
) -> None:
    scripted.decompose(TEACHER, "no idea")
    r = reward(server, parse_retries=0)
    out = r.score_groups([[sample("same"), sample("off")]])[0]
    assert all(math.isnan(o.score) and o.components["failed"] == 1.0 for o in out)
    assert r.stats().failed_samples == 2


@pytest.mark.parametrize(
    ("on_failure", "expected"), [("nan", math.nan), ("zero", 2.0 * 1.0), ("raise", None)]
)
def test_judge_timeouts_get_the_documented_outcome(
    server: ChatServer, scripted: ScriptedModels, on_failure: str, expected: float | None
) -> None:
    scripted.queue("m2", "m2", ChatReply.delayed(5.0, "yes"), ChatReply.delayed(5.0, "yes"))
    r = reward(server, on_failure=on_failure, outcome="ground_truth", outcome_weight=2.0)
    group = [sample("same \\boxed{1}", truth="1")]
    scripted.decompose("same \\boxed{1}", decomposition("m1/q1/a1", "m2/q2/a2"))
    if expected is None:
        with pytest.raises(RuntimeError, match="timed out after 0.3 s"):
            r.score_groups([group])
        return
    out = r.score_groups([group])[0][0]
    assert math.isnan(out.score) if math.isnan(expected) else out.score == expected
    assert math.isnan(out.components["structure"]) and out.components["failed"] == 1.0
    assert out.components["outcome"] == 1.0
    stats = r.stats()
    assert stats.failed_samples == 1 and stats.judge.timeouts == 2 and stats.judge.failures == 1


def test_a_judge_that_never_says_yes_or_no_fails_the_sample(
    server: ChatServer, scripted: ScriptedModels
) -> None:
    scripted.queue("m1", "mX", "They differ slightly.", "Mostly no.")
    r = reward(server, parse_retries=1)
    out = r.score_groups([[sample("off")]])[0][0]
    assert math.isnan(out.score) and out.components["failed"] == 1.0
    assert out.components["judge_calls"] == 1.0
    assert r.stats().gsrm.verdict_failures == 1


def test_judge_can_be_a_separate_endpoint(server: ChatServer, scripted: ScriptedModels) -> None:
    with running_chat_server(lambda request: "yes") as judge:
        r = reward(server, judge={"url": judge.url, "model": "judge"})
        assert r.score_groups([[sample("off")]])[0][0].score == 2.0  # this judge says yes
        assert match_requests(server) == [] and len(judge.requests) == 6
        assert {q.model for q in judge.requests} == {"judge"}


def test_through_the_trl_adapter(server: ChatServer, scripted: ScriptedModels) -> None:
    endpoint = {"url": server.url, "model": "m", "backoff_seconds": 0}
    func = make_trl_reward("rlkd", {"decomposer": endpoint, "outcome": None})
    logged: dict[str, float] = {}
    scores = func(
        prompts=["Solve it."] * 2,
        completions=["same", "penalised"],
        teacher=[TEACHER, TEACHER],
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    assert scores == [3.0, 0.75]
    assert logged["rlkd/structure"] == pytest.approx(1.875)
    func.close()


def test_settings_schema_has_no_secret_fields() -> None:
    schema = RLKDRewardSettings.model_json_schema()
    endpoint = schema["$defs"]["ChatEndpointSettings"]["properties"]
    assert "api_key_env" in endpoint and "api_key" not in endpoint


@pytest.mark.parametrize("text", ["same \ud800 path", "\udfff", "a\ud83d\ude00b"])
def test_lone_surrogates_are_sent_as_replacement_characters(text: str) -> None:
    """A policy can emit lone surrogates; JSON over HTTP cannot carry them (issue 12)."""
    steps = [{"meta_reasoning": "m1", "sub_problem": "q1", "answer": "a1"}]
    seen: list[str] = []

    def models(request: Any) -> str:
        prompt = str(request.messages[0]["content"])
        if "[Reasoning Path]" not in prompt:
            return "yes"
        seen.append(prompt)
        return decomposition("m1/q1/a1")

    with running_chat_server(models) as server:
        out = reward(server).score_groups([[sample(text, teacher=steps)]])[0][0]
    assert out.score == 1.0 and out.components["failed"] == 0.0
    assert "\ufffd" in seen[0]
