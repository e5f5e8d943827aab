"""Format + length surrogate (Xin et al. eqs. 1-5 as the authors' code computes them): hand-computed
points, the reference's format rule, and the validity check."""

from __future__ import annotations

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines.format_length import (
    FormatLengthReward,
    format_length_reward,
    format_reward,
    has_think,
    last_boxed,
    length_reward,
    reference_answer,
    valid_math,
)
from sarl.rewards.registry import RewardConfigError, create_reward, get_reward_class


@pytest.mark.parametrize(
    ("x", "p", "expected"),
    [
        (0.0, 0.5, 0.0),
        (0.25, 0.5, 0.75),  # 1 - (1 - 0.5)^2
        (0.5, 0.5, 1.0),  # the turning point
        (0.75, 0.5, 0.5),  # 1 - 2 * 0.5^2
        (1.0, 0.5, -1.0),
        (1.7, 0.5, -1.0),  # beyond L_max: clipped to x = 1
        (0.4, 0.8, 0.75),  # 1 - (1 - 0.5)^2 at p = 0.8
        (0.9, 0.8, 0.5),  # 1 - 2 * 0.5^2
    ],
)
def test_smooth_length_reward_eq_2(x: float, p: float, expected: float) -> None:
    assert length_reward(x, p) == pytest.approx(expected)


@pytest.mark.parametrize("x", [0.0, 0.1, 0.3, 0.5, 0.6, 0.9, 1.0])
def test_polyline_eq_4_at_p_half(x: float) -> None:
    paper = 2 * x if x <= 0.5 else 3 - 4 * x
    assert length_reward(x, 0.5, "polyline") == pytest.approx(paper)


def test_smooth_curve_is_continuous_and_flat_at_the_turning_point() -> None:
    for p in (0.3, 0.5, 0.8):
        eps = 1e-6
        assert length_reward(p - eps, p) == pytest.approx(1.0, abs=1e-9)
        assert length_reward(p + eps, p) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(
    "content",
    ["1", "\\frac{3}{2}", "x^2 + 12y =1", "(0,\\infty)", "[0, 1)", "-5", "a = -b", "\\sqrt[3]{x}"],
)
def test_paper_right_cases_are_valid(content: str) -> None:
    assert valid_math(content)
    assert format_reward(f"so \\boxed{{{content}}}", "box_only") == (1.0, True)
    assert format_reward(f"<think>t</think> so \\boxed{{{content}}}") == (1.0, True)


@pytest.mark.parametrize("content", ["", "  ", "x +* 2", "(0,1 ", "2 -", "* 3", "(1))", "a == b"])
def test_paper_wrong_cases_are_invalid(content: str) -> None:
    assert not valid_math(content)
    assert format_reward(f"so \\boxed{{{content}}}", "box_only") == (0.0, False)
    assert format_reward(f"<think>t</think> so \\boxed{{{content}}}") == (0.5, False)


# --- the reference rule (rl-without-gt math_reward.py / evaluator.py), computed by hand ----------

THINK_BOX = "<think>add 3 and 4</think> so \\boxed{7}"
BOX = "add 3 and 4, so \\boxed{7}"
BOX_IN_THINK = "<think>so \\boxed{7}</think> the answer is 7"
THINK_BAD_BOX = "<think>add</think> so \\boxed{7 +* 2}"
NOTHING = "the answer is 7"


@pytest.mark.parametrize(
    ("response", "x", "expected"),
    [
        # x = 0.5 -> R_l = 1; R = 0.5*think + 0.5*box + R_l with a valid box, else min(0, R_l)
        (THINK_BOX, 0.5, 0.5 + 0.5 + 1.0),
        (BOX, 0.5, 0.0 + 0.5 + 1.0),  # no think tags: half the format
        (BOX_IN_THINK, 0.5, 0.0),  # the box is in the thinking: no answer, min(0, 1)
        (THINK_BAD_BOX, 0.5, 0.0),  # think tags alone never earn reward
        (NOTHING, 0.5, 0.0),
        # x = 0.25 -> R_l = 1 - (1 - 0.5)^2 = 0.75
        (THINK_BOX, 0.25, 1.0 + 0.75),
        (BOX, 0.25, 0.5 + 0.75),
        # x = 1 -> R_l = -1: a long response is penalised whatever its format
        (THINK_BOX, 1.0, 1.0 - 1.0),
        (BOX, 1.0, 0.5 - 1.0),
        (BOX_IN_THINK, 1.0, -1.0),
        (NOTHING, 1.0, -1.0),
    ],
)
def test_reference_rule_end_to_end(response: str, x: float, expected: float) -> None:
    reward = create_reward("format_length", {"max_length": round(len(response) / x)})
    out = reward.score_samples([Sample(response)])[0]
    assert out.components["length_ratio"] == pytest.approx(x)
    assert out.score == pytest.approx(expected)


def test_components_name_both_halves() -> None:
    reward = create_reward("format_length", {"max_length": 2 * len(BOX_IN_THINK)})
    out = reward.score_samples([Sample(BOX_IN_THINK)])[0]
    assert dict(out.components) == {
        "format": 0.5,
        "think": 1.0,
        "valid_answer": 0.0,
        "length_reward": 1.0,
        "length_ratio": 0.5,
    }


@pytest.mark.parametrize(
    ("response", "rule", "expected"),
    [
        (BOX, "box_only", 1.0 + 1.0),  # the old rule: no think half
        (BOX_IN_THINK, "box_only", 1.0 + 1.0),  # ... and a box in the thinking counts
        (THINK_BOX, "box_only", 1.0 + 1.0),
        (BOX, "reference", 0.5 + 1.0),
        (BOX_IN_THINK, "reference", 0.0),
    ],
)
def test_box_only_keeps_the_paper_eq_1_text(response: str, rule: str, expected: float) -> None:
    reward = create_reward("format_length", {"max_length": 2 * len(response), "format_rule": rule})
    assert reward.score_samples([Sample(response)])[0].score == pytest.approx(expected)


@pytest.mark.parametrize(
    ("response", "think"),
    [
        ("<think>a</think>", True),
        ("<think></think>", True),
        ("x <think>a\nb</think> y", True),
        ("<think>a", False),
        ("a</think>", False),  # a prompt-opened think block is not the reference's think format
        ("</think><think>", False),
        ("<think>" * 1000 + "</think>", True),
    ],
)
def test_think_tags_as_the_reference_searches_them(response: str, think: bool) -> None:
    assert has_think(response) is think


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{x^{2}+1}", "x^{2}+1"),
        ("\\boxed{3} then \\boxed{4", ""),  # the last box is unclosed: no earlier fallback
        ("\\boxed {3}", ""),  # the brace must follow at once
        ("<think>\\boxed{3}</think>", ""),  # only text after the last </think> counts
        ("<think>a</think>\\boxed{1}</think> \\boxed{2}", "2"),
        ("<think>a</think><answer>so \\boxed{5} ok</answer>", "5"),
        ("<answer>\\(x\\) then \\(x+1\\) and \\(y</answer>", "x+1"),
        ("<answer> $42$ </answer>", "42"),
        ("<answer>a</answer> <answer>\\boxed{6}</answer>", "6"),  # greedy: first open, last close
        ("\\boxed{9} <answer></answer>", ""),  # an answer block wins over a box outside it
    ],
)
def test_answer_found_as_the_reference_parses_it(response: str, answer: str) -> None:
    assert reference_answer(response) == answer


def test_unclosed_or_missing_box_is_a_format_error() -> None:
    assert format_reward("the answer is 3") == (0.0, False)
    assert format_reward("\\boxed{3") == (0.0, False)
    assert format_reward("the answer is 3", "box_only") == (0.0, False)
    assert last_boxed("no box") is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "response",
    ["<think>" * 200_000, "<answer>" + "\\(" * 200_000 + "</answer>", "\\boxed{" * 200_000],
)
def test_hostile_text_is_scanned_in_linear_time(response: str) -> None:
    out = create_reward("format_length").score_samples([Sample(response)])[0]
    assert out.components["valid_answer"] == 0.0


@pytest.mark.parametrize(
    ("r_format", "r_length", "valid", "expected"),
    [
        (1.0, 0.75, True, 1.75),
        (0.5, -1.0, True, -0.5),
        (0.0, 0.75, False, 0.0),
        (0.5, 0.75, False, 0.0),  # the think half alone earns nothing
        (0.5, -0.5, False, -0.5),  # ... and is not added to a penalty either: min(0, R_l)
    ],
)
def test_eq_5_as_the_reference_combines(
    r_format: float, r_length: float, valid: bool, expected: float
) -> None:
    assert format_length_reward(r_format, r_length, valid) == expected


def test_reward_in_chars_and_words() -> None:
    assert get_reward_class("format_length") is FormatLengthReward
    response = "ab \\boxed{7}"  # 12 characters, 2 words, no think tags
    out = create_reward("format_length", {"max_length": 24}).score_samples([Sample(response)])[0]
    assert out.score == pytest.approx(1.5)  # format 0.5 (box, no think) + length 1 (x = 0.5)
    words = create_reward("format_length", {"max_length": 8, "length_unit": "words"})
    out = words.score_samples([Sample(response), Sample("no box here yet")])
    assert out[0].score == pytest.approx(0.5 + 0.75)  # x = 2/8 = 0.25
    assert out[1].score == 0.0 and out[1].components["length_reward"] == 1.0  # x = 0.5, no box


@pytest.mark.parametrize(
    "settings",
    [
        {"max_length": 0},
        {"turning_point": 1.0},
        {"turning_point": 0},
        {"shape": "cosine"},
        {"length_unit": "tokens"},
        {"format_rule": "paper"},
    ],
)
def test_bad_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(RewardConfigError, match=next(iter(settings))):
        create_reward("format_length", settings)
