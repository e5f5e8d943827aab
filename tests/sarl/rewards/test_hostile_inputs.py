"""Every registered reward on text a policy might write (issue 12).

A policy writes whatever earns reward, pathological text included. For every registered reward:
no exception escapes ``score_groups`` (``self_certainty`` raises its documented
``LogitsRequiredError`` whatever the text), the output mirrors the input, every score is finite
or the reward's documented failure marker (NaN: ``rlkd``'s ``on_failure``, ``tag_maxflow``'s
masked completions), and a hostile group never changes the result of a good one. Reproducers
found by a tester are explicit cases; the rest is a property over adversarial text: huge
numbers, deep nesting, unclosed tags and boxes, lone surrogates, 1 MB strings and 10k steps.
Time bounds are tested where the work is (``test_math_answer``, ``rlkd/test_steps``,
``structured_qa/test_parsing``, ``tagged/test_lcs``, ``tagged/test_maxflow``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sarl.embedding.base import normalize_rows
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.baselines import math_verify as mv
from sarl.rewards.baselines.self_certainty import LogitsRequiredError
from sarl.rewards.registry import create_reward, reward_names
from sarl.rewards.structure.reward import StructureReward, StructureRewardSettings
from tests.support.chat_server import ChatRequest, running_chat_server

HUGE = "1" + "0" * 4400  # past Python's 4,300-digit int-string limit
TEACHER = [
    {"meta_reasoning": "add", "sub_problem": "2+2?", "answer": "4"},
    {"meta_reasoning": "check", "sub_problem": "is it 4?", "answer": "yes"},
]
GOOD = (
    "<think><verify> 2 + 2 = 4 </verify>\n\n<summarize> so 4 </summarize>\n\n"
    "<ask>What is 2+2?</ask><reflect>4</reflect>\n\n"
    "[Meta-reasoning]: add\n[Sub-problem]: 2+2?\n[Answer]: 4\n</think>"
    "<answer>4</answer> The answer is \\boxed{4}."
)
#: Rewards whose documented failure marker is a NaN score.
NAN_MARKER = {"rlkd", "tag_maxflow"}


def sample(response: str, truth: str = "4") -> Sample:
    return Sample(response, prompt="What is 2+2?", ground_truth=truth, extra={"teacher": TEACHER})


class Utf8Embedder:
    """Deterministic in-process embedder that, like a tokenizer or JSON over HTTP, encodes each
    text as strict UTF-8 (a lone surrogate reaching it raises)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode("utf-8")).digest()[:8], "little")
            rows.append(np.random.default_rng(seed % 5).normal(size=16))  # 5 "functions"
        return normalize_rows(np.array(rows)) if rows else np.zeros((0, 16), np.float32)


_PAIR = re.compile(r"\[Text A\]:\n(.*?)\n\n\[Text B\]:\n(.*?)\n\nDo the two texts match", re.S)
_PATH = re.compile(r"\[Reasoning Path\]:\n(.*)$", re.S)


def rlkd_models(request: ChatRequest) -> str:
    """Decomposer that echoes the path (so the step parser sees the policy's text) and a judge
    that says yes to equal texts."""
    prompt = request.text
    if m := _PATH.search(prompt):
        return m[1]
    m = _PAIR.search(prompt)
    return "yes" if m is not None and m[1] == m[2] else "no"


def qa_judge(request: ChatRequest) -> str:
    """Judge that echoes the start of the pairs (the reply parser sees the policy's text) and
    then grades every pair 1."""
    text = request.text
    n = int(re.search(r"REASONING \((\d+) pairs\)", text)[1])  # type: ignore[index]
    echo = text.split("REASONING", 1)[1][:3000]
    return echo + "\n" + json.dumps({"pairs": [{"relevance": 1, "quality": 1}] * n})


def _tag_maxflow() -> Reward | None:
    try:
        from tests.sarl.rewards.tagged.test_maxflow_model import _model, _tokenizer
    except pytest.skip.Exception:  # torch or transformers missing
        return None
    from sarl.rewards.tagged.maxflow import TagMaxFlowReward, TagMaxFlowSettings

    tokenizer = _tokenizer()
    settings = TagMaxFlowSettings(model="unused", tau=0.0, max_completion_tokens=200)
    return TagMaxFlowReward(settings, model=_model(len(tokenizer)), tokenizer=tokenizer)


@pytest.fixture(scope="module")
def rewards() -> Iterator[dict[str, Reward | None]]:
    with contextlib.ExitStack() as stack:
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        mp.setattr(mv, "math_verify_available", lambda: False)  # the answers_equal fallback
        chat = stack.enter_context(running_chat_server(rlkd_models))
        judge = stack.enter_context(running_chat_server(qa_judge))
        endpoint = {"url": chat.url, "model": "m", "timeout_seconds": 30, "max_retries": 0}
        client = {"url": judge.url, "model": "j", "max_retries": 0, "timeout_s": 30}
        built: dict[str, Reward | None] = {
            "structure": StructureReward(
                StructureRewardSettings(workers=1), embedder=Utf8Embedder()
            ),
            "rlkd": create_reward("rlkd", {"decomposer": endpoint, "parse_retries": 0}),
            "structured_qa": create_reward("structured_qa", {"judge_client": client}),
            "tag_maxflow": _tag_maxflow(),
        }
        for name in reward_names():
            if name not in built:
                built[name] = create_reward(name)
        yield built
        for reward in built.values():
            if reward is not None:
                reward.close()


def test_every_registered_reward_is_covered(rewards: dict[str, Reward | None]) -> None:
    assert set(rewards) == set(reward_names())


def same(a: RewardOutput, b: RewardOutput) -> bool:
    """Equal outputs, NaN equal to NaN."""

    def eq(x: float, y: float) -> bool:
        return x == y or (math.isnan(x) and math.isnan(y))

    return (
        eq(a.score, b.score)
        and a.components.keys() == b.components.keys()
        and all(eq(a.components[k], b.components[k]) for k in a.components)
    )


def check(name: str, reward: Reward | None, hostile: list[list[Sample]]) -> None:
    """The guarantees of the module docstring for ``hostile`` groups next to a good one."""
    if reward is None:
        pytest.skip(f"{name}: its optional dependencies are not installed")
    good = [sample(GOOD), sample(GOOD.replace("\\boxed{4}", "\\boxed{5}"))]
    if name == "self_certainty":
        with pytest.raises(LogitsRequiredError):
            reward.score_groups([*hostile, good])
        return
    out = reward.score_groups([*hostile, good])
    assert [len(g) for g in out] == [len(g) for g in [*hostile, good]]
    for group in out:
        for o in group:
            assert math.isfinite(o.score) or (name in NAN_MARKER and math.isnan(o.score)), o
            assert tuple(o.components) == reward.component_keys
            assert not any(math.isinf(v) for v in o.components.values()), o
    [alone] = reward.score_groups([good])
    assert all(same(a, b) for a, b in zip(alone, out[-1], strict=True))
    if not reward.needs_group and hostile and hostile[0]:
        # a per-sample score does not depend on the group it is in
        mixed = reward.score_groups([[*hostile[0], *good]])[0][len(hostile[0]) :]
        assert all(same(a, b) for a, b in zip(alone, mixed, strict=True))


# --- the tester's reproducers ---------------------------------------------------------------

REPRODUCERS = {
    "huge boxed number": [[sample(f"\\boxed{{{HUGE}}}"), sample(f"\\boxed{{{HUGE}}}", HUGE)]],
    "huge ground truth": [
        [sample("\\boxed{4}", HUGE), sample(f"\\boxed{{{HUGE}.5}}", f"{HUGE}/3")]
    ],
    "unclosed boxes": [[sample("\\boxed{" * 6000)] * 2],
    "step and asterisks": [[sample("step 1" + "*" * 3000 + "\n[Answer]: 4")]],
    "lone surrogates": [[sample("\ud800 <think><verify>\udfff</verify></think>\\boxed{4}\udc00")]],
    "nested tags": [[sample("<think>" + "<ask>" * 20_000 + "</reflect>" * 20_000)]],
    "deep brackets": [[sample("[" * 50_000 + "{" * 50_000)]],
    "many steps": [
        [sample("<think>" + "<verify> s </verify>\n\n" * 10_000 + "</think>\\boxed{4}")]
    ],
}


@pytest.mark.timeout(600)  # hang guard only
@pytest.mark.parametrize("case", list(REPRODUCERS))
@pytest.mark.parametrize("name", sorted(reward_names()))
def test_reproducers(rewards: dict[str, Reward | None], name: str, case: str) -> None:
    check(name, rewards[name], REPRODUCERS[case])


# --- the property --------------------------------------------------------------------------

MB = 1_000_000
BLOBS = [
    "x" * MB,  # 1 MB
    ("<verify> a step </verify>\n\n" * (MB // 27))[:MB],  # 1 MB, ~37k tagged steps
    "<think>" + "".join(f"<ask>q{k}?</ask><reflect>r</reflect>\n\n" for k in range(10_000)),
    "\\boxed{" * (MB // 7),
    "{" * MB,
    "<think>" + "<verify>" * (MB // 8),
    ("\ud800\n\n" * (MB // 3))[:MB],
    "1" * MB,
]
FRAGMENTS = [
    f"\\boxed{{{HUGE}}}",
    f"\\boxed{{{HUGE}/7}}",
    f"\\boxed{{\\frac{{{HUGE}}}{{3}}}}",
    "\\boxed{" * 500,
    "\\boxed{4}",
    "\\boxed{(7+5)*3-4}",
    "\\boxed{1/0}",
    "[" * 3000,
    "{" * 3000 + "}" * 10,
    '{"steps": [' * 2000,
    "<think>",
    "</think>",
    "<verify>",
    "</verify>",
    "<\\verify>",
    "<ask>",
    "</ask>",
    "<reflect>",
    "</reflect>",
    "<answer>",
    "</answer>",
    "<ask>what?</ask><reflect>yes</reflect>",
    "step 1" + "*" * 800,
    "**Step 2:** **Meta-reasoning**: m\n**Answer**: a",
    "[Meta-reasoning]: add\n[Sub-problem]: 2+2?\n[Answer]: 4",
    "```json\n[" + "[" * 2000 + "\n```",
    "\ud800",
    "\udfff",
    "\x00",
    "\r",
    "\n\n",
    "yes",
    "ｙｅｓ？",
]
texts = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS),
        st.text(max_size=30),
        st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"]),
    ),
    max_size=8,
).map("".join)
responses = st.one_of(
    texts,
    st.tuples(texts, st.sampled_from(BLOBS), texts).map("".join),
)
truths = st.sampled_from(["4", "\\boxed{4}", HUGE, f"{HUGE}/3", "(7+5)*3-4", "1/2", ""])
hostile_groups = st.lists(
    st.lists(st.builds(sample, responses, truths), min_size=1, max_size=3), min_size=1, max_size=2
)


@pytest.mark.timeout(900)  # hang guard only
@pytest.mark.parametrize("name", sorted(reward_names()))
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(hostile=hostile_groups)
def test_any_text(
    rewards: dict[str, Reward | None], name: str, hostile: list[list[Sample]]
) -> None:
    check(name, rewards[name], hostile)
