"""The registered ``structured_qa`` reward: settings, R = R_verif + λ·R_judge end to end against a
local chat server, the neutral outcome on judge failure, and the TRL adapter."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sarl.integrations.trl import make_trl_reward
from sarl.rewards.base import RewardOutput, Sample
from sarl.rewards.registry import RewardConfigError, create_reward, get_reward_class
from sarl.rewards.structured_qa.judge import JudgeStats
from sarl.rewards.structured_qa.reward import COMPONENT_KEYS, StructuredQAReward
from tests.support.chat_server import ChatReply, ChatRequest, ChatServer, running_chat_server

from .test_parsing import PAPER_TRACE


def trace(n_pairs: int, answer: str, *, mark: str = "?") -> str:
    body = "".join(f"<ask>step {i}{mark}</ask><reflect>r{i}</reflect>" for i in range(n_pairs))
    return f"<think>{body}</think><answer>{answer}</answer>"


def uniform_judge(request: ChatRequest) -> ChatReply:
    """Every pair gets the score written in the problem ('score 1', 'score -1', ...)."""
    n = int(re.search(r"\((\d+) pairs\)", request.text).group(1))  # type: ignore[union-attr]
    match = re.search(r"score (-?\d)", request.text)
    if match is None:
        return ChatReply.error(500, "judge is down")
    s = int(match.group(1))
    return ChatReply(json.dumps({"pairs": [{"relevance": s, "quality": s}] * n}))


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with running_chat_server(uniform_judge) as srv:
        yield srv


def make(server: ChatServer, **settings: Any) -> StructuredQAReward:
    client = {"url": server.url, "model": "judge", "backoff_s": 0.01, "max_backoff_s": 0.02}
    reward = create_reward("structured_qa", {"judge_client": client, **settings})
    assert isinstance(reward, StructuredQAReward)
    return reward


def components(out: RewardOutput) -> tuple[float, ...]:
    return tuple(out.components[k] for k in COMPONENT_KEYS)


def test_registered_by_name() -> None:
    assert get_reward_class("structured_qa") is StructuredQAReward


def test_judge_needs_an_endpoint_unless_turned_off() -> None:
    with pytest.raises(RewardConfigError, match=r"'judge_client'.*url and judge_client\.model"):
        create_reward("structured_qa")
    reward = create_reward("structured_qa", {"judge": False})
    assert isinstance(reward, StructuredQAReward) and reward.judge_stats() is None


def test_verifiable_only_when_the_judge_is_off() -> None:
    reward = create_reward("structured_qa", {"judge": False, "lambda_judge": 0.35})
    [[good, wrong], [long]] = reward.score_groups(
        [
            [Sample(PAPER_TRACE, ground_truth="18"), Sample(PAPER_TRACE, ground_truth="17")],
            [Sample(trace(8, "5", mark=""), ground_truth="5")],
        ]
    )
    # keys: r_correct, r_format, r_length, r_qa, r_judge, n_pairs, judge_failed
    assert good.score == pytest.approx(1.1)
    assert components(good) == pytest.approx((1.0, 0.1, 0.0, 0.0, 0.0, 4.0, 0.0))
    assert wrong.score == pytest.approx(0.1)
    # 8 pairs without '?': 1 + 0.1 - 0.06 - 0.1 (8 violations, capped)
    assert long.score == pytest.approx(0.94)
    assert components(long) == pytest.approx((1.0, 0.1, -0.06, -0.1, 0.0, 8.0, 0.0))
    assert tuple(good.components) == reward.component_keys == COMPONENT_KEYS


def test_composite_reward_with_the_judge(server: ChatServer) -> None:
    reward = make(server, lambda_judge=0.25)
    groups = [
        [
            Sample(PAPER_TRACE, prompt="score 1", ground_truth="18"),
            Sample(PAPER_TRACE, prompt="score -1", ground_truth="18"),
            Sample("<answer>18</answer>", prompt="score 1", ground_truth="18"),  # not judgeable
        ],
        [Sample(trace(2, "3"), prompt="score 0", ground_truth="4")],
    ]
    [[best, worse, bare], [wrong]] = reward.score_groups(groups)
    assert best.score == pytest.approx(1.1 + 0.25 * 1.0)
    assert components(best) == pytest.approx((1.0, 0.1, 0.0, 0.0, 1.0, 4.0, 0.0))
    assert worse.score == pytest.approx(1.1 - 0.25)
    assert bare.score == pytest.approx(1.0)
    assert components(bare) == pytest.approx((1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    assert wrong.score == pytest.approx(0.1)
    assert len(server.requests) == 3  # one call per judgeable trajectory
    assert reward.judge_stats() == JudgeStats(requests=3, retries=0, judged=3, failures=0)


def test_judge_failure_is_neutral_flagged_and_counted(server: ChatServer) -> None:
    reward = create_reward(
        "structured_qa",
        {
            "lambda_judge": 0.25,
            "judge_client": {
                "url": server.url,
                "model": "judge",
                "max_retries": 2,
                "backoff_s": 0.01,
                "max_backoff_s": 0.02,
            },
        },
    )
    assert isinstance(reward, StructuredQAReward)
    samples = [
        Sample(PAPER_TRACE, prompt="the judge cannot parse this one", ground_truth="18"),
        Sample(PAPER_TRACE, prompt="score 1", ground_truth="18"),
    ]
    [[failed, fine]] = reward.score_groups([samples])
    assert failed.score == pytest.approx(1.1)  # R_verif only
    assert components(failed) == pytest.approx((1.0, 0.1, 0.0, 0.0, 0.0, 4.0, 1.0))
    assert fine.components["judge_failed"] == 0.0 and fine.score == pytest.approx(1.35)
    assert reward.judge_stats() == JudgeStats(requests=4, retries=2, judged=1, failures=1)


def test_missing_ground_truth_is_an_error_before_any_judge_call(server: ChatServer) -> None:
    reward = make(server)
    groups = [[Sample(PAPER_TRACE, ground_truth="18")], [Sample(PAPER_TRACE, prompt="Eggs?")]]
    with pytest.raises(ValueError, match=r"sample 0 of group 1 \(prompt 'Eggs\?'\) has no ground"):
        reward.score_groups(groups)
    assert server.requests == []


def test_problem_column_is_what_the_judge_sees(server: ChatServer) -> None:
    reward = make(server)
    sample = Sample(
        PAPER_TRACE, prompt="chat template ...", ground_truth="18", extra={"problem": "score 0"}
    )
    [[out]] = reward.score_groups([[sample]])
    assert out.components["r_judge"] == 0.0 and out.components["judge_failed"] == 0.0
    [request] = server.requests
    assert "PROBLEM:\nscore 0\n" in request.text


def test_async_and_sync_paths_agree_also_inside_a_running_loop(server: ChatServer) -> None:
    reward = make(server, lambda_judge=0.1)
    groups = [[Sample(PAPER_TRACE, prompt=f"score {s}", ground_truth="18") for s in (1, 0, -1)]]
    sync = reward.score_groups(groups)

    async def both() -> tuple[list[list[RewardOutput]], list[list[RewardOutput]]]:
        return await reward.ascore_groups(groups), reward.score_groups(groups)

    from_async, sync_in_loop = asyncio.run(both())
    assert sync == from_async == sync_in_loop
    assert [o.score for o in sync[0]] == pytest.approx([1.2, 1.1, 1.0])


def test_correctness_dominance_end_to_end(server: ChatServer) -> None:
    """The paper's worst correct vs best wrong (§3.3) at λ = 0.35, through the real judge path."""
    reward = make(server, lambda_judge=0.35)
    ugly_correct = Sample(trace(12, "7", mark=""), prompt="score -1", ground_truth="7")
    pretty_wrong = Sample(PAPER_TRACE, prompt="score 1", ground_truth="7")
    [[correct, wrong]] = reward.score_groups([[ugly_correct, pretty_wrong]])
    assert correct.score == pytest.approx(1.0 + 0.1 - 0.1 - 0.1 - 0.35)  # 0.55
    assert wrong.score == pytest.approx(0.1 + 0.35)  # 0.45
    assert correct.score > wrong.score


def test_through_the_trl_adapter(server: ChatServer) -> None:
    client = {"url": server.url, "model": "judge", "max_retries": 0}
    func = make_trl_reward("structured_qa", {"judge_client": client, "lambda_judge": 0.2})
    logged: dict[str, float] = {}
    rewards = func(
        prompts=["score 1", "score 1", "down"],
        completions=[PAPER_TRACE, trace(1, "17"), PAPER_TRACE],
        ground_truth=["18", "18", "18"],
        log_metric=logged.__setitem__,
    )
    assert rewards == pytest.approx([1.3, 0.3, 1.1])
    assert logged["structured_qa/judge_failed"] == pytest.approx(1 / 3)
    assert logged["structured_qa/r_correct"] == pytest.approx(2 / 3)
    assert all(not math.isnan(v) for v in logged.values())


def test_lone_surrogates_reach_the_judge_as_replacement_characters(server: ChatServer) -> None:
    """A policy can emit lone surrogates; JSON over HTTP cannot carry them (issue 12)."""
    reward = make(server, lambda_judge=0.25)
    text = PAPER_TRACE.replace("3 + 4 = 7 eggs.", "3 + 4 = 7 eggs \ud800.")
    [[out]] = reward.score_groups([[Sample(text, prompt="score 1", ground_truth="18")]])
    assert out.score == pytest.approx(1.1 + 0.25)
    assert out.components["judge_failed"] == 0.0
    assert "\ufffd" in server.requests[0].text
