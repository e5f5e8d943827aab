"""Final-answer extraction and equivalence for verifiable math rewards (pure functions).

Called by the ``ground_truth`` reward and by held-out evaluation in the local runner.

* ``extract_answer``: the content of the last complete ``\\boxed{...}`` (balanced braces). There
  is deliberately no fallback (no "last number in the text"): a response without a boxed answer
  has no answer, so the format the prompt asks for is part of what is rewarded.
* ``answers_equal``: after normalisation, exact rational comparison when both sides are numbers
  (``3``, ``-0.5``, ``1/2``, ``\\frac{1}{2}``); equal value *and* the same multiset of numbers
  when both are integer expressions with an operator (the Countdown rule: any expression of the
  given numbers that reaches the target is a solution); otherwise string equality.

Both run in linear time on any text a policy can write (issue 12): boxes are found in one pass
with one brace stack, and a number with more than :data:`MAX_NUMBER_DIGITS` digits is not turned
into an int (Python refuses past 4,300 digits, and the conversion is superlinear below that); it
is compared as a normalised string instead. A real answer never has that many digits.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

_BOXED_OPEN = re.compile(r"\\boxed *\{")
_BRACE = re.compile(r"[{}]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_INT = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)")
_RATIO = re.compile(r"([+-]?\d+)/([+-]?\d+)")
_FRAC = re.compile(r"([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}")
_EXPR_TOKEN = re.compile(r"\d+|[-+*/()]")
_MAX_EXPR_CHARS = 200  # expressions are answers, not programs: bound the parser's work
#: Numbers with more digits than this are compared as strings, never converted to int.
MAX_NUMBER_DIGITS = 1000


def extract_answer(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` whose braces balance, stripped; None if there is none.

    An unclosed ``\\boxed{`` (generation cut at the length limit) is skipped, so an earlier
    complete one still counts. ``\\boxed {x}`` (space before the brace) is accepted. Linear in
    the text: every box's closing brace comes from one left-to-right brace stack, instead of a
    scan to the end of the text per unclosed box (quadratic on ``\\boxed{`` repeated).
    """
    opens = [m.end() - 1 for m in _BOXED_OPEN.finditer(text)]  # offsets of the boxes' "{"
    if not opens:
        return None
    closes = _closing_braces(text, opens[0], frozenset(opens))
    for start in reversed(opens):
        end = closes.get(start)
        if end is not None:
            return text[start + 1 : end].strip()
    return None


def _closing_braces(text: str, start: int, wanted: frozenset[int]) -> dict[int, int]:
    """Offset of the matching ``}`` of each ``{`` in ``wanted`` that is closed (from ``start``).

    A ``}`` closes the innermost open ``{``; one with nothing open is ignored. That is the same
    balance rule as counting depth from each box, for every box at once.
    """
    stack: list[int] = []
    closes: dict[int, int] = {}
    for m in _BRACE.finditer(text, start):
        if m[0] == "{":
            stack.append(m.start())
        elif stack:
            opened = stack.pop()
            if opened in wanted:
                closes[opened] = m.start()
    return closes


def normalize(answer: str) -> str:
    """Canonical form for comparison: no whitespace, ``$``, ``\\text{}`` wrappers, trailing dot
    or thousands separators; ``\\dfrac``/``\\tfrac`` -> ``\\frac``; ×, ``\\times``, ``\\cdot`` ->
    ``*`` and ÷, ``\\div`` -> ``/``."""
    s = answer.strip()
    for _ in range(3):  # nested wrappers such as \text{\textbf{5}}
        s = _TEXT.sub(r"\1", s)
    for dropped in ("\\$", "$", "\\!", "\\,", "\\ ", "\\left", "\\right"):
        s = s.replace(dropped, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for old, new in (("\\times", "*"), ("\\cdot", "*"), ("×", "*"), ("\\div", "/"), ("÷", "/")):
        s = s.replace(old, new)
    s = re.sub(r"\s+", "", s)
    s = _THOUSANDS.sub("", s)
    return s.rstrip(".")


def as_rational(answer: str) -> Fraction | None:
    """The exact value of a normalised integer, decimal, ``a/b`` or ``\\frac{a}{b}``; else None.

    None as well for a number with more than :data:`MAX_NUMBER_DIGITS` digits (see the module
    docstring): it is then compared as a string.
    """
    # A number is its digits plus at most a dozen other characters (sign, point, \\frac{}{}).
    if len(answer) > MAX_NUMBER_DIGITS + 12 or sum(map(str.isdigit, answer)) > MAX_NUMBER_DIGITS:
        return None
    try:
        if _INT.fullmatch(answer) or _DECIMAL.fullmatch(answer):
            return Fraction(answer)
        if m := _RATIO.fullmatch(answer):
            return Fraction(int(m[1]), int(m[2]))
        if m := _FRAC.fullmatch(answer):
            value = Fraction(int(m[2]), int(m[3]))
            return -value if m[1] == "-" else value
    except ZeroDivisionError:
        return None
    return None


@dataclass(frozen=True, slots=True)
class _Expr:
    value: Fraction
    numbers: Counter[int]


def as_expression(answer: str) -> tuple[Fraction, Counter[int]] | None:
    """Value and multiset of integer literals of a normalised + - * / expression with at least one
    binary operator; None if it is not one (or divides by zero)."""
    if len(answer) > _MAX_EXPR_CHARS or not re.fullmatch(r"[\d+\-*/()]+", answer):
        return None
    tokens = _EXPR_TOKEN.findall(answer)
    parser = _Parser(tokens)
    try:
        expr = parser.expression()
    except (ValueError, ZeroDivisionError, IndexError, RecursionError):
        return None
    if parser.pos != len(tokens) or not parser.binary_ops:
        return None
    return expr.value, expr.numbers


class _Parser:
    """Recursive descent over ``expr := term (('+'|'-') term)*``, ``term := factor (('*'|'/')
    factor)*``, ``factor := '-' factor | number | '(' expr ')'``."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.binary_ops = 0

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expression(self) -> _Expr:
        left = self._term()
        while self._peek() in ("+", "-"):
            op = self.tokens[self.pos]
            self.pos += 1
            right = self._term()
            value = left.value + right.value if op == "+" else left.value - right.value
            left = _Expr(value, left.numbers + right.numbers)
            self.binary_ops += 1
        return left

    def _term(self) -> _Expr:
        left = self._factor()
        while self._peek() in ("*", "/"):
            op = self.tokens[self.pos]
            self.pos += 1
            right = self._factor()
            value = left.value * right.value if op == "*" else left.value / right.value
            left = _Expr(value, left.numbers + right.numbers)
            self.binary_ops += 1
        return left

    def _factor(self) -> _Expr:
        token = self.tokens[self.pos]
        self.pos += 1
        if token == "-":
            inner = self._factor()
            return _Expr(-inner.value, inner.numbers)
        if token == "(":
            inner = self.expression()
            if self._peek() != ")":
                raise ValueError("unbalanced parenthesis")
            self.pos += 1
            return inner
        if token.isdigit():
            return _Expr(Fraction(int(token)), Counter([int(token)]))
        raise ValueError(f"unexpected token {token!r}")


def answers_equal(pred: str, truth: str) -> bool:
    """Whether a predicted final answer matches the ground truth (rules in the module docstring).

    A number never equals an expression, so boxing the Countdown target instead of an expression
    that reaches it is wrong, and so is boxing the arithmetic question's expression.
    """
    p, t = normalize(pred), normalize(truth)
    if not p or not t:
        return False
    p_num, t_num = as_rational(p), as_rational(t)
    if p_num is not None and t_num is not None:
        return p_num == t_num
    p_expr, t_expr = as_expression(p), as_expression(t)
    if p_expr is not None and t_expr is not None:
        return p_expr == t_expr
    return p == t


def response_correct(response: str, truth: str) -> bool:
    """Whether ``response``'s last ``\\boxed{}`` answer equals ``truth`` (no answer: False).

    A ``truth`` that itself holds ``\\boxed{}`` (a full MATH solution) is reduced to its boxed
    answer first. The ``ground_truth`` reward's rule, shared with the reward-validity figures.
    """
    pred = extract_answer(response)
    if pred is None:
        return False
    return answers_equal(pred, extract_answer(truth) or truth)
