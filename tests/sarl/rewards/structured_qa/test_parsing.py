"""Parsing responses against the Structured Q&A schema (§3.1): pairs, answer, violations (§3.3)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarl.rewards.structured_qa.parsing import (
    QAPair,
    Violation,
    ViolationKind,
    _Scan,
    parse_response,
)

V = ViolationKind

# The paper's representative correct GSM8K trace (§5.2), in the schema of §3.1.
PAPER_TRACE = (
    "<think>"
    "<ask> How many eggs does Janet consume in a day (breakfast and baking)? </ask>"
    "<reflect> 3 + 4 = 7 eggs. </reflect>\n"
    "<ask> How many eggs remain for sale? </ask> <reflect> 16 - 7 = 9 eggs. </reflect>\n"
    "<ask> How much money does selling 9 eggs at $2 yield? </ask>"
    " <reflect> 9 x 2 = 18. </reflect>\n"
    "<ask> Does 16 - 3 - 4 then x2 equal 18? </ask>"
    "<reflect> 16 - 3 = 13, 13 - 4 = 9, 9 x 2 = 18. Consistent. </reflect>"
    "</think>\n<answer>18</answer>"
)


def kinds(text: str) -> list[ViolationKind]:
    return [v.kind for v in parse_response(text).violations]


def test_paper_trace_is_well_formed() -> None:
    parsed = parse_response(PAPER_TRACE)
    assert parsed.n_pairs == 4
    assert parsed.pairs[1] == QAPair("How many eggs remain for sale?", "16 - 7 = 9 eggs.")
    assert parsed.answer == "18"
    assert parsed.has_think and parsed.well_formed
    assert parsed.violations == ()
    assert parsed.stray_chars == 0


@pytest.mark.parametrize(
    ("text", "n_pairs", "answer", "has_think", "violations"),
    [
        # no pairs: a well-placed but empty think block
        ("<think></think><answer>7</answer>", 0, "7", True, []),
        ("<think>just thinking</think><answer>7</answer>", 0, "7", True, []),
        # missing blocks are R_format's business, not violations
        ("<think><ask>a?</ask><reflect>b</reflect></think>", 1, None, True, []),
        ("<answer>7</answer>", 0, "7", False, []),
        ("no tags at all", 0, None, False, []),
        # question form: one violation per ask
        (
            "<think><ask>a</ask><reflect>b</reflect></think><answer>1</answer>",
            1,
            "1",
            True,
            [V.MISSING_QUESTION_MARK],
        ),
        (
            "<think><ask>  </ask><reflect>b</reflect></think><answer>1</answer>",
            0,
            "1",
            True,
            [V.EMPTY_QUESTION],
        ),
        (
            "<think><ask>?</ask><reflect>b</reflect></think><answer>1</answer>",
            0,
            "1",
            True,
            [V.EMPTY_QUESTION],
        ),
        ("<think><ask>a？</ask><reflect>b</reflect></think><answer>1</answer>", 1, "1", True, []),
        (
            "<think><ask>a?</ask><reflect> </reflect></think><answer>1</answer>",
            0,
            "1",
            True,
            [V.EMPTY_REFLECTION],
        ),
        # unpaired ask / reflect
        ("<think><ask>a?</ask></think><answer>1</answer>", 0, "1", True, [V.UNPAIRED_ASK]),
        (
            "<think><reflect>b</reflect></think><answer>1</answer>",
            0,
            "1",
            True,
            [V.UNPAIRED_REFLECT],
        ),
        (
            "<think><ask>a?</ask><ask>c?</ask><reflect>d</reflect></think><answer>1</answer>",
            1,
            "1",
            True,
            [V.UNPAIRED_ASK],
        ),
        (
            "<think><reflect>b</reflect><ask>a?</ask></think><answer>1</answer>",
            0,
            "1",
            True,
            [V.UNPAIRED_REFLECT, V.UNPAIRED_ASK],
        ),
        # nested tags: the inner tag is misplaced; the ask then lacks its reflect partner
        (
            "<think><ask>a? <reflect>b</reflect></ask></think><answer>1</answer>",
            0,
            "1",
            True,
            [V.UNPAIRED_ASK, V.MISPLACED_TAG],
        ),
        (
            "<think><think><ask>a?</ask><reflect>b</reflect></think></think><answer>1</answer>",
            0,
            "1",
            True,
            [V.MISPLACED_TAG],
        ),
        (
            "<think><ask>a?</ask><reflect>b</reflect><answer>1</answer></think>",
            1,
            None,
            True,
            [V.MISPLACED_TAG],
        ),
        (
            "<think><ask>a?</ask><reflect>b</reflect></think><answer>1<ask>x?</ask></answer>",
            1,
            "1<ask>x?</ask>",
            True,
            [V.MISPLACED_TAG],
        ),
        # pairs outside think are misplaced, and not collected
        (
            "<ask>a?</ask><reflect>b</reflect><answer>1</answer>",
            0,
            "1",
            False,
            [V.MISPLACED_TAG, V.MISPLACED_TAG],
        ),
        # unclosed and unopened tags
        (
            "<think><ask>a?</ask><reflect>b</think><answer>1</answer>",
            0,
            "1",
            True,
            [V.UNPAIRED_ASK, V.UNCLOSED_TAG],
        ),
        (
            "<think><ask>a?</ask><reflect>b</reflect></think><answer>1",
            1,
            None,
            True,
            [V.UNCLOSED_TAG],
        ),
        (
            "<think><ask>a?</ask><reflect>b</reflect></reflect></think><answer>1</answer>",
            1,
            "1",
            True,
            [V.UNOPENED_TAG],
        ),
        (
            "<ask>a?</ask></think><answer>1</answer>",
            0,
            "1",
            False,
            [V.MISPLACED_TAG, V.UNOPENED_TAG],
        ),
        # a generation cut inside think: pairs kept, but no complete think block
        (
            "<think><ask>a?</ask><reflect>b</reflect><ask>c?</ask><refl",
            1,
            None,
            False,
            [V.UNCLOSED_TAG, V.UNPAIRED_ASK],
        ),
        # a second answer or think block, and think after the answer, are misplaced
        (
            "<think><ask>a?</ask><reflect>b</reflect></think><answer>1</answer><answer>2</answer>",
            1,
            "1",
            True,
            [V.MISPLACED_TAG],
        ),
        (
            "<answer>1</answer><think><ask>a?</ask><reflect>b</reflect></think>",
            0,
            "1",
            False,
            [V.MISPLACED_TAG],
        ),
    ],
)
def test_edge_cases(
    text: str,
    n_pairs: int,
    answer: str | None,
    has_think: bool,
    violations: list[ViolationKind],
) -> None:
    parsed = parse_response(text)
    assert parsed.n_pairs == n_pairs
    assert parsed.answer == answer
    assert parsed.has_think is has_think
    assert [v.kind for v in parsed.violations] == violations


def test_extra_text_is_reported_not_penalised() -> None:
    text = (
        "Sure! <think>Let me see. <ask>a?</ask> hmm <reflect>b</reflect> ok</think>"
        " so <answer> 7 </answer> done"
    )
    parsed = parse_response(text)
    assert parsed.violations == ()
    assert parsed.pairs == (QAPair("a?", "b"),)
    assert parsed.answer == "7"
    assert parsed.well_formed
    assert parsed.stray_chars == len("Sure!Letmesee.hmmokso" + "done")


def test_violation_offsets_point_at_the_tag() -> None:
    text = "<think><ask>a?</ask><reflect>b</reflect><ask>c</ask></think>"
    [missing_mark, unpaired] = parse_response(text).violations
    assert text[missing_mark.offset :].startswith("<ask>c")
    assert (missing_mark.kind, unpaired.kind) == (V.MISSING_QUESTION_MARK, V.UNPAIRED_ASK)
    assert str(unpaired) == f"unpaired_ask <ask> at {unpaired.offset}"


def test_tags_are_exact() -> None:
    # Upper case or attributes are not tags: the text is stray, nothing is parsed.
    parsed = parse_response("<THINK><Ask x=1>a?</Ask></THINK><answer>1</answer>")
    assert (parsed.has_think, parsed.n_pairs, parsed.answer, parsed.violations) == (
        False,
        0,
        "1",
        (),
    )


# --- hostile responses (issue 12) ---


@pytest.mark.timeout(60)  # hang guard: closing tags used to scan the whole stack (~1e10 steps)
def test_deeply_nested_tags_parse_in_linear_time() -> None:
    n = 100_000
    parsed = parse_response("<think>" + "<ask>" * n + "</reflect>" * n)
    counts = _count(parsed.violations)
    # the first ask is placed, the others are misplaced inside it; no reflect was ever opened;
    # the think block and the first ask are never closed.
    assert counts == {V.MISPLACED_TAG: n - 1, V.UNOPENED_TAG: n, V.UNCLOSED_TAG: 2}
    assert not parsed.has_think and parsed.n_pairs == 0


def _count(violations: tuple[Violation, ...]) -> dict[ViolationKind, int]:
    out: dict[ViolationKind, int] = {}
    for v in violations:
        out[v.kind] = out.get(v.kind, 0) + 1
    return out


class _StackScan(_Scan):
    """The closing-tag lookup as first written: scan the stack from the top."""

    def innermost(self, name: str) -> int | None:
        return next(
            (i for i in range(len(self.stack) - 1, -1, -1) if self.stack[i].name == name), None
        )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [f"<{t}>" for t in ("think", "ask", "reflect", "answer")]
            + [f"</{t}>" for t in ("think", "ask", "reflect", "answer")]
            + ["q?", "r", " ", "x"]
        ),
        max_size=40,
    )
)
def test_indexed_closing_lookup_agrees_with_a_stack_scan(parts: list[str]) -> None:
    text = "".join(parts)
    fast, slow = _Scan(text), _StackScan(text)
    fast.run()
    slow.run()
    assert (fast.violations, fast.answer, fast.has_think, fast.covered) == (
        slow.violations,
        slow.answer,
        slow.has_think,
        slow.covered,
    )
    assert [(c.name, c.text, c.offset, c.broken) for c in fast.think_children] == [
        (c.name, c.text, c.offset, c.broken) for c in slow.think_children
    ]
