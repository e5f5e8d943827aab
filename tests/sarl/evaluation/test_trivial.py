"""The trivial predictors of correctness ("has an answer", "answer format is valid"), and how a
reward is read against them: the pooled AUROC a prompt-level reward earns without ordering any
pair of one prompt, the few-prompts warning."""

from __future__ import annotations

import pytest

from sarl.evaluation.trivial import (
    FORMAT_VALID,
    HAS_ANSWER,
    format_valid,
    has_answer,
    is_trivial,
    oriented,
    strongest,
    trivial_scores,
)
from sarl.evaluation.validity import MIN_PROMPTS, few_prompts_warning, validity


@pytest.mark.parametrize(
    ("response", "answer", "valid"),
    [
        ("so \\boxed{12}", 1.0, 1.0),
        ("no answer here, 12", 0.0, 0.0),  # no box: no answer (the grader's rule)
        ("\\boxed{}", 0.0, 0.0),  # an empty box is no answer: it can never be correct
        ("\\boxed{  }", 0.0, 0.0),
        ("\\boxed{x +* 2}", 1.0, 0.0),  # an answer, not well-formed mathematics
        ("\\boxed{(0,1 }", 1.0, 0.0),  # unbalanced
        ("\\boxed{3", 0.0, 0.0),  # cut off: unclosed
        ("\\boxed{1} then \\boxed{[0, 1)}", 1.0, 1.0),  # the last box; an interval is fine
    ],
)
def test_predictors(response: str, answer: float, valid: float) -> None:
    assert has_answer(response) == answer
    assert format_valid(response) == valid
    assert trivial_scores([response]) == {HAS_ANSWER: [answer], FORMAT_VALID: [valid]}


def test_names_orientation_and_the_strongest() -> None:
    assert is_trivial(HAS_ANSWER) and not is_trivial("ttrl")
    assert oriented(0.3, lower_is_better=True) == pytest.approx(0.7)
    assert oriented(0.3, lower_is_better=False) == 0.3
    assert oriented(None, lower_is_better=True) is None
    correct, groups = [True, False, False, True], [0, 0, 1, 1]
    weak = validity([1.0, 1.0, 1.0, 1.0], correct, groups)  # ties: within-prompt 0.5
    strong = validity([1.0, 0.0, 0.0, 1.0], correct, groups)  # perfect
    assert strongest({HAS_ANSWER: weak, FORMAT_VALID: strong}, "pair_auroc") == (FORMAT_VALID, 1.0)
    assert strongest({HAS_ANSWER: weak, FORMAT_VALID: weak}, "pair_auroc") == (HAS_ANSWER, 0.5)
    assert strongest({}, "auroc") is None


def test_a_prompt_level_reward_orders_no_pair_yet_reads_valid_pooled() -> None:
    """An easy prompt (3 of 4 correct) scored 1 throughout, a hard one (1 of 4) scored 0: the
    reward knows the prompt, not the response. Within each prompt it ties every pair (agreement
    0, within-prompt AUROC 0.5, no signal for GRPO), yet pooled over the batch 9 of 16 pairs
    agree and 6 tie: AUROC 0.75. Hence the within-prompt figure is the headline."""
    correct = [True, True, True, False, True, False, False, False]
    scores = [1.0] * 4 + [0.0] * 4
    v = validity(scores, correct, [0] * 4 + [1] * 4)
    assert (v.pair_agreement, v.pair_ties, v.pair_auroc) == (0.0, 1.0, 0.5)
    assert v.auroc == pytest.approx(0.75)
    assert (v.prompts, v.mixed_prompts) == (2, 2)


def test_prompt_counts_and_the_warning_below_the_minimum() -> None:
    # prompt 0 mixed, prompt 1 all correct, prompt 2 all NaN (no defined score)
    nan = float("nan")
    v = validity([0.9, 0.1, 0.5, 0.5, nan, nan], [True, False, True, True, True, False],
                 [0, 0, 1, 1, 2, 2])  # fmt: skip
    assert (v.prompts, v.mixed_prompts, v.pairs) == (2, 1, 1)
    warning = few_prompts_warning(v)
    assert warning is not None and "only 1 prompts" in warning and f"< {MIN_PROMPTS}" in warning
    many = validity([0.9, 0.1] * MIN_PROMPTS, [True, False] * MIN_PROMPTS,
                    [g for g in range(MIN_PROMPTS) for _ in range(2)])  # fmt: skip
    assert many.mixed_prompts == MIN_PROMPTS and few_prompts_warning(many) is None
