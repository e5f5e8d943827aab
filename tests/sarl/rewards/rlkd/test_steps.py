"""Parsing decomposer replies into (meta-reasoning, sub-problem, answer) steps, in any format."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarl.rewards.rlkd import steps as steps_module
from sarl.rewards.rlkd.steps import Step, parse_steps, steps_from_json

TWO = [Step("plan A", "what is x?", "x = 3"), Step("plan B", "what is y?", "y = 1/2")]

FORMATS = {
    "tagged lines": (
        "Step 1\n[Meta-reasoning]: plan A\n[Sub-problem]: what is x?\n[Answer]: x = 3\n\n"
        "Step 2\n[Meta-reasoning]: plan B\n[Sub-problem]: what is y?\n[Answer]: y = 1/2\n"
    ),
    "inline brackets (paper layout)": (
        "[Meta-reasoning]: plan A [Sub-problem]: what is x? [Answer]: x = 3\n"
        "[Meta-reasoning]-plan B [Sub-problem]-what is y? [Answer]-y = 1/2"
    ),
    "numbered list": (
        "1. Meta-reasoning: plan A\n   Sub-problem: what is x?\n   Answer: x = 3\n"
        "2) Meta reasoning: plan B\n   Sub-question: what is y?\n   Answer: y = 1/2\n"
    ),
    "markdown": (
        "### Step 1\n- **Meta-reasoning:** plan A\n- **Sub-problem**: what is x?\n"
        "- **Answer:** x = 3\n\n---\n\n### Step 2\n**Metareasoning 2:** plan B\n"
        "**Subproblem [2]:** what is y?\n**Answer:** y = 1/2\n"
    ),
    "step prefixes": (
        "Step 1 - Meta-reasoning: plan A\nStep 1 - Sub-problem: what is x?\n"
        "Step 1 - Answer: x = 3\n"
        "Step 2: META-REASONING: plan B\nStep 2: QUESTION: what is y?\nStep 2: ANSWER: y = 1/2"
    ),
    "json in a fence": (
        "Here are the steps:\n```json\n"
        '[{"meta_reasoning": "plan A", "sub_problem": "what is x?", "answer": "x = 3"},'
        ' {"Meta-reasoning": "plan B", "Sub-problem": "what is y?", "Answer": "y = 1/2"}]\n```'
    ),
    "bare json object": (
        '{"steps": [{"meta": "plan A", "question": "what is x?", "answer": "x = 3"},'
        ' {"m": "plan B", "q": "what is y?", "a": "y = 1/2"}]}'
    ),
    "reference examples (Meat-reasoning)": (
        "[Response]:\n[Meat-reasoning 1]: plan A\n[Sub-problem 1]: what is x?  \n"
        "[Answer 1]: x = 3  \n\n[Meat-reasoning 2]: plan B\n[Sub-problem 2]: what is y?\n"
        "[Answer 2]: y = 1/2\n</answer>\n"
    ),
    "reference system prompt (sub-think/Query)": (
        "[sub-think 1]: plan A\n[Query 1]: what is x?\n[Answer 1]: x = 3\n"
        "[sub-think 2]: plan B\n[Query 2]: what is y?\n[Answer 2]: y = 1/2"
    ),
    "json with reference keys": (
        '[{"sub-think": "plan A", "query": "what is x?", "answer": "x = 3"},'
        ' {"Meat-reasoning": "plan B", "Sub-problem": "what is y?", "Answer": "y = 1/2"}]'
    ),
    "reasoning model reply": (
        "<think>Meta-reasoning: draft that must be ignored</think>\n"
        "Meta-reasoning: plan A\nSub-problem: what is x?\nAnswer: x = 3\n"
        "Meta-reasoning: plan B\nSub-problem: what is y?\nAnswer: y = 1/2"
    ),
}


@pytest.mark.parametrize("reply", FORMATS.values(), ids=FORMATS.keys())
def test_every_format_gives_the_same_steps(reply: str) -> None:
    assert parse_steps(reply) == TWO


def test_multiline_fields_and_latex_survive() -> None:
    reply = (
        "[Meta-reasoning]: First bound the sum,\nthen solve for $k$.\n"
        "[Sub-problem]: Find $\\frac{a}{b}$ when $a = 2$.\n[Answer]: $\\frac{2}{b}$"
    )
    assert parse_steps(reply) == [
        Step(
            "First bound the sum,\nthen solve for $k$.",
            "Find $\\frac{a}{b}$ when $a = 2$.",
            "$\\frac{2}{b}$",
        )
    ]


def test_the_reference_layout_with_its_trailers() -> None:
    # make_data/Prompt.py's examples: "[Meat-reasoning N]: ...-", a closing line after the last
    # answer; the GSRM's training targets end in "</answer>".
    reply = (
        "[Response]: \n"
        "[Meat-reasoning 1]: First standardise the value with the z-score formula.-  \n"
        "[Sub-problem 1]: What is the z-score of 33?  \n[Answer 1]: 0.75  \n\n"
        "[Meat-reasoning 2]: Then read the upper tail of the normal curve.-  \n"
        "[Sub-problem 2]: What is P(Z > 0.75)?  \n[Answer 2]: 0.2266 \n"
        "So the final answer is:\n-0.2266.</answer>"
    )
    assert parse_steps(reply) == [
        Step(
            "First standardise the value with the z-score formula.",
            "What is the z-score of 33?",
            "0.75",
        ),
        Step(
            "Then read the upper tail of the normal curve.",
            "What is P(Z > 0.75)?",
            "0.2266 \nSo the final answer is:\n-0.2266.",
        ),
    ]


@pytest.mark.parametrize("answer", ["-5", "x - y", "n-", "1 -"])
def test_a_dash_is_kept_unless_it_follows_a_sentence(answer: str) -> None:
    assert parse_steps(f"Meta-reasoning: m\nAnswer: {answer}") == [Step("m", "", answer)]


def test_a_missing_field_stays_empty_and_keeps_alignment() -> None:
    reply = (
        "Meta-reasoning: m1\nAnswer: a1\n"  # no sub-problem
        "Meta-reasoning: m2\nSub-problem: q2\nAnswer: a2\n"
        "Sub-problem: q3\nAnswer: a3"  # no meta-reasoning
    )
    assert parse_steps(reply) == [
        Step("m1", "", "a1"),
        Step("m2", "q2", "a2"),
        Step("", "q3", "a3"),
    ]


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I cannot decompose this.",
        "Answer the question carefully.\nThe answer is 3.",
        "[]",
        '{"steps": "none"}',
        "```json\nnot json\n```",
    ],
)
def test_replies_without_steps_give_none(reply: str) -> None:
    assert parse_steps(reply) == []


def test_json_items_without_fields_are_skipped() -> None:
    payload = [{"other": 1}, "text", {"meta": "m", "question": "q", "answer": 7}]
    assert steps_from_json(payload) == [Step("m", "q", "7")]


# --- hostile replies (issue 12): a decomposer may echo whatever the policy wrote ---


@pytest.mark.timeout(60)  # hang guard: the old pattern backtracked cubically (800 '*': 3.8 s)
@pytest.mark.parametrize(
    "text",
    [
        "step 1" + "*" * 5000,
        "Step 12" + "*_`" * 2000 + " \t" * 100 + "x",
        "### step 2" + "*" * 5000 + ":",
        "- **step 3" + "*" * 5000 + "\n" + "[" + "*" * 5000,
        "[Answer" + " 1" * 3000 + "*" * 3000,
    ],
)
def test_emphasis_and_space_runs_are_scanned_without_backtracking(text: str) -> None:
    assert parse_steps(text) == []


def test_a_label_after_a_long_emphasis_run_is_still_found() -> None:
    text = "step 1" + "*" * 3000 + " Meta-reasoning: plan A\nAnswer: x"
    assert parse_steps(text) == [Step("plan A", "", "x")]


@pytest.mark.parametrize(
    "text", ["[" * 100_000, '{"steps": ' * 50_000, "```json\n" + "[" * 100_000 + "```"]
)
def test_json_nested_beyond_the_recursion_limit_is_not_json(text: str) -> None:
    assert parse_steps(text) == []


# The label patterns as first written (backtracking runs), to check the possessive ones agree.
_E, _L = (
    r"[*_`]*",
    r"(?P<label>me(?:ta|at)[ \t_-]*reasoning|sub[ \t_-]*(?:problem|question|think)"
    r"|query|question|answer)",
)
_I = r"(?:[ \t]*(?:\[\d+\]|\(\d+\)|\d+))?"
BACKTRACKING = {
    "_LINE_LABEL": re.compile(
        rf"^[ \t>]*(?:(?:[-*+•]|\d+[.)]|\#{{1,6}})[ \t]+)?"
        rf"(?:{_E}step[ \t]*\d+{_E}[ \t]*[-–—:.)]?[ \t]*)?"
        rf"{_E}\[?{_E}{_L}{_I}{_E}\]?{_E}[ \t]*[:：]{_E}[ \t]*",
        re.I | re.M,
    ),
    "_INLINE_LABEL": re.compile(rf"\[{_E}{_L}{_I}{_E}\]{_E}[ \t]*[:：\-–—]?[ \t]*", re.I),
    "_STEP_HEADER": re.compile(
        rf"^[ \t]*(?:\#{{1,6}}[ \t]*)?{_E}step[ \t]*\d+{_E}[ \t]*[:.]?{_E}[ \t]*$"
        r"|^[ \t]*-{3,}[ \t]*$",
        re.I | re.M,
    ),
}
TOKENS = ["*", "**", "_", "`", " ", "\t", "\n", "[", "]", "(", ")", ":", "-", ".", "#", ">", "1"]
TOKENS += ["12", "step", "Step ", "meta", "Meta-reasoning", "reasoning", "sub", "-problem"]
TOKENS += ["question", "Answer", "answer", "x", "---", "：", "•", "Sub question"]
TOKENS += ["Meat-reasoning", "meat", "sub-think", "think", "Query", "query"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=25).map("".join))
def test_possessive_patterns_match_what_the_backtracking_ones_matched(text: str) -> None:
    for name, old in BACKTRACKING.items():
        new = getattr(steps_module, name)
        assert [(m.span(), m.groupdict()) for m in new.finditer(text)] == [
            (m.span(), m.groupdict()) for m in old.finditer(text)
        ], name
