"""TTRL's grader: whether a response's answer matches the pseudo-label (pure functions).

The ``ttrl`` reward (:mod:`sarl.rewards.baselines.ttrl`) rewards a response when
:func:`grade_answer` (its answer, the label) holds, as TTRL's reference does: ``qwen_reward_fn``
(``ttrl/qwen/qwen_eval.py`` of github.com/PRIME-RL/TTRL at 3e2cc93) calls ``grade_answer`` of
``ttrl/qwen/math_grade.py`` (PRM800K's grader) with ``math_normalize.py`` (the MATH release's
``_strip_string``). Written from reading those files; an answer is correct when

(a) the MATH normaliser makes both sides the same string (``\\dfrac{3}{4}`` = ``\\frac34``,
    ``\\sqrt3`` = ``\\sqrt{3}``, ``30^\\circ`` = ``30``, ``5\\text{ cm}`` = ``5``, ``x=5`` = ``5``,
    ``0.5`` = ``\\frac{1}{2}``), or
(b) PRM800K's normaliser does (units, ``%``, ``$``, case: ``Yes`` = ``yes``, ``1,000`` = ``1000``,
    ``5.0`` = ``5``; LaTeX turned to text), or
(c) element by element (tuples and intervals split on commas): two plain fractions must be the
    same string (``2/4`` is *not* ``1/2``: the grader refuses unreduced fractions), an integer
    never equals a non-integer form, and otherwise SymPy must simplify the difference to 0.

The SymPy step (c) runs only when SymPy is installed (``pip install 'sarl[math]'``); without it
step (c) is false. It runs on at most two distinct letters and refuses powers written as ``^{``,
``^(`` or with several digits, as the reference does, and here also texts over
:data:`MAX_SYMPY_CHARS` characters and factorials (``!``), whose evaluation is unbounded. LaTeX
is turned to text by :func:`~sarl.rewards.baselines.latex_text.latex_to_text`, a subset of
pylatexenc's ``latex2text`` that the reference uses (see that module for what differs).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from functools import lru_cache
from typing import Any

from sarl.rewards.baselines.latex_text import latex_to_text
from sarl.rewards.baselines.ttrl_extract import MAX_ANSWER_CHARS, fix_a_slash_b, fix_fracs

#: Longest difference text handed to SymPy (the reference has no bound; see the docstring).
MAX_SYMPY_CHARS = 200
_PRM_UNITS = [
    "degree",
    "centimeter",
    "cm",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
]
_PRM_UNIT_PATTERNS = tuple(re.compile(u + r"(es)?(s)? *(\^[0-9]+)?") for u in _PRM_UNITS)
_TEXT_WRAPPED = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_COMMA_THOUSANDS = re.compile(r"(\d)(,)(\d\d\d)($|\D)")


def grade_answer(given: str, truth: str) -> bool:
    """Whether ``given`` matches ``truth`` under the reference grader's rules (docstring)."""
    if max(len(given), len(truth)) > MAX_ANSWER_CHARS:  # not a real answer: plain strings
        return given == truth
    if mathd_normalize(truth) == mathd_normalize(given):
        return True
    truth_n, given_n = prm_normalize(truth), prm_normalize(given)
    if truth_n == given_n:
        return True
    if not given_n:
        return False
    truth_elems, given_elems = split_tuple(truth_n), split_tuple(given_n)
    if len(truth_elems) > 1 and (truth_n[0] != given_n[0] or truth_n[-1] != given_n[-1]):
        return False
    if len(truth_elems) != len(given_elems):
        return False
    return all(_elements_equal(t, g) for t, g in zip(truth_elems, given_elems, strict=True))


def _elements_equal(truth: str, given: str) -> bool:
    if _is_frac(truth) and _is_frac(given):
        return truth == given  # unreduced fractions are not accepted
    if _str_is_int(truth) != _str_is_int(given):
        return False
    return equal_under_sympy(truth, given)


def mathd_normalize(answer: str) -> str:
    """The MATH release's normaliser; on its failures the input (trimmed, unwrapped) as is."""
    answer = answer.strip()
    if m := _TEXT_WRAPPED.search(answer):
        answer = m["text"].strip()
    try:
        return _mathd_strip(answer)
    except ValueError:
        return answer


def _mathd_strip(s: str) -> str:
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    for dropped in ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$"):
        s = s.replace(dropped, "")
    if "\\text{ " in s:  # a unit on the right; the reference fails on two of them
        pieces = s.split("\\text{ ")
        if len(pieces) != 2:
            raise ValueError("two units")
        s = pieces[0]
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    parts = s.split("=")
    if len(parts) == 2 and len(parts[0]) <= 2:
        s = parts[1]
    s = _mathd_fix_sqrt(s).replace(" ", "")
    s = fix_fracs(s, strict=True)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return fix_a_slash_b(s, sqrt_ok=False)


def _mathd_fix_sqrt(s: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}`` (first character only); fails on a trailing ``\\sqrt``."""
    pieces = s.split("\\sqrt")
    out = pieces[0]
    for piece in pieces[1:]:
        if not piece:
            raise ValueError("\\sqrt at the end")
        out += "\\sqrt" + (piece if piece[0] == "{" else "{" + piece[0] + "}" + piece[1:])
    return out


def prm_normalize(expr: str) -> str:
    """PRM800K's ``_normalize`` (``math_grade.py``)."""
    if m := _TEXT_WRAPPED.search(expr):
        expr = m["text"]
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    for word, power in (("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):
        expr = expr.replace(word, power)
    for pattern in _PRM_UNIT_PATTERNS:
        expr = pattern.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if (value := _float(expr)) is not None and _is_int(value):
        expr = str(round(value))
    if "\\" in expr:
        expr = _latex_to_sympy_text(expr)
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number: 7 3/4 -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _str_is_int(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _latex_to_sympy_text(expr: str) -> str:
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac")
    try:
        text = latex_to_text(expr.replace("\\frac", " \\frac"))  # " ": mixed numbers
    except RecursionError:  # deep nesting: the reference, failing, keeps the text too
        return expr
    for old, new in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        text = text.replace(old, new)
    return text.strip()


def _float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _is_int(x: float) -> bool:
    try:
        return abs(x - round(x)) <= 1e-7
    except (OverflowError, ValueError):  # inf, nan
        return False


def _str_is_int(s: str) -> bool:
    value = _float(_strip_thousands(s))
    return value is not None and _is_int(value)


def _is_frac(s: str) -> bool:
    return re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", s) is not None


def _strip_thousands(expr: str) -> str:
    """Drop commas of well-formed thousands (``1,000``), keep tuple commas (``1,2``)."""
    while (nxt := _COMMA_THOUSANDS.sub(r"\1\3\4", expr)) != expr:
        expr = nxt
    return expr


def split_tuple(expr: str) -> list[str]:
    """Elements of a tuple or interval (``(1,2]``), else the expression itself."""
    expr = _strip_thousands(expr)
    if not expr:
        return []
    brackets = "()[]"
    inner = expr[1:-1]
    if len(expr) > 2 and expr[0] in brackets and expr[-1] in brackets:  # noqa: SIM102 - reads as the rule
        if not any(ch in inner for ch in brackets):
            return [e.strip() for e in inner.split(",")]
    return [expr]


def sympy_available() -> bool:
    return importlib.util.find_spec("sympy") is not None


def _allow_sympy(expr: str) -> bool:
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr:
        return False
    if re.search(r"\^[0-9]+\^", expr) or re.search(r"\^[0-9][0-9]+", expr):
        return False
    return len(expr) <= MAX_SYMPY_CHARS and "!" not in expr  # sarl's bound (docstring)


@lru_cache(maxsize=4096)
def equal_under_sympy(truth: str, given: str) -> bool:
    """Whether SymPy simplifies ``(truth)-(given)`` to 0 (false without SymPy or on failure)."""
    expr = f"({truth})-({given})"
    if not _allow_sympy(expr) or not sympy_available():
        return False
    sympy: Any = importlib.import_module("sympy")
    parser: Any = importlib.import_module("sympy.parsing.sympy_parser")
    transformations = (*parser.standard_transformations, parser.implicit_multiplication_application)
    try:
        diff = parser.parse_expr(expr.replace("^", "**"), transformations=transformations)
        return bool(sympy.simplify(diff) == 0)
    except Exception:  # any parse or evaluation failure means "not shown equal"
        return False
