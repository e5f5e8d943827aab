"""TTRL's answer extraction and normalisation, reimplemented from its rules (pure functions).

The ``ttrl`` reward (:mod:`sarl.rewards.baselines.ttrl`) votes over the strings this returns, as
TTRL's reference does: ``test_time_train_metrics`` (``verl/verl/utils/reward_score/ttrl/
ttt_metrics.py`` of github.com/PRIME-RL/TTRL at 3e2cc93) extracts each response's answer with
``extract_answer(text, "math")`` of ``ttrl/qwen/qwen_math_parser.py`` (adapted from
Qwen2.5-Math's ``evaluation/parser.py``). Written from reading that file; the rules, in order:

* ``final answer is $…$. I hope`` (Minerva's format) wins; else the text after the *last*
  ``boxed``: a balanced ``{…}`` (an unclosed last box runs to the end of the text: the reference
  keeps it), or, without a brace, up to the next ``$`` (``\\boxed 5``); an empty ``\\boxed{}``
  gives ``""``, which is an answer like any other in the vote; else the text after the last
  ``he answer is``, then ``final answer is``; else the last number (``-?\\d*\\.?\\d+``, commas
  dropped); else ``""``.
* Newlines are removed, a leading ``:`` and one trailing ``.`` or ``/`` dropped, then
  :func:`strip_string` (Qwen's normaliser: units, ``\\text{}``, ``x=``, ``%``, ``^\\circ``,
  ``\\dfrac``, ``\\sqrt3``, ``\\frac12``, ``a/b`` -> ``\\frac{a}{b}``, ...).

Known differences from the reference (its own quirks not reproduced): a phrase of several number
words (``one hundred``) is left as words (the reference's ``word2number`` turns it into a number;
one number word such as ``five`` is converted here too); an extracted answer longer than
:data:`MAX_ANSWER_CHARS` (an unclosed box at the start of a huge text, never a real answer) is
kept raw, unnormalised, so that scoring stays linear in the text (issue 12).
"""

from __future__ import annotations

import re

#: Longer extracted answers are not normalised (module docstring); graded as plain strings.
MAX_ANSWER_CHARS = 1000
_NUMBER = re.compile(r"-?\d*\.?\d+")
# Units stripped by Qwen's normaliser (``unit_texts`` of qwen_math_parser.py, mostly MathQA's),
# each used there as a regular expression between non-word characters; plurals are added.
_UNITS = [
    "east",
    "degree",
    "mph",
    "kmph",
    "ft",
    "m sqaure",
    " m east",
    "sq m",
    "deg",
    "mile",
    "q .",
    "monkey",
    "prime",
    "ratio",
    "profit of rs",
    "rd",
    "o",
    "gm",
    "p . m",
    "lb",
    "tile",
    "per",
    "dm",
    "lt",
    "gain",
    "ab",
    "way",
    "west",
    "a .",
    "b .",
    "c .",
    "d .",
    "e .",
    "f .",
    "g .",
    "h .",
    "t",
    "a",
    "h",
    "no change",
    "men",
    "soldier",
    "pie",
    "bc",
    "excess",
    "st",
    "inches",
    "noon",
    "percent",
    "by",
    "gal",
    "kmh",
    "c",
    "acre",
    "rise",
    "a . m",
    "th",
    "π r 2",
    "sq",
    "mark",
    "l",
    "toy",
    "coin",
    "sq . m",
    "gallon",
    "° f",
    "profit",
    "minw",
    "yr",
    "women",
    "feet",
    "am",
    "pm",
    "hr",
    "cu cm",
    "square",
    "v â € ™",
    "are",
    "rupee",
    "rounds",
    "cubic",
    "cc",
    "mtr",
    "s",
    "ohm",
    "number",
    "kmph",
    "day",
    "hour",
    "minute",
    "min",
    "second",
    "man",
    "woman",
    "sec",
    "cube",
    "mt",
    "sq inch",
    "mp",
    "∏ cm ³",
    "hectare",
    "more",
    "sec",
    "unit",
    "cu . m",
    "cm 2",
    "rs .",
    "rs",
    "kg",
    "g",
    "month",
    "km",
    "m",
    "cm",
    "mm",
    "apple",
    "liter",
    "loss",
    "yard",
    "pure",
    "year",
    "increase",
    "decrease",
    "d",
    "less",
    "Surface",
    "litre",
    "pi sq m",
    "s .",
    "metre",
    "meter",
    "inch",
]
UNIT_PATTERNS = tuple(
    re.compile(r"(^|\W)" + u + r"($|\W)") for u in (*_UNITS, *(u + "s" for u in _UNITS))
)
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
} | {
    w: str(10 * (i + 2))
    for i, w in enumerate(
        ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    )
}
_NUMBER_WORDS |= {
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "billion": "1000000000",
}
_VARIABLE_PREFIXES = ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to")


def extract_ttrl_answer(text: str) -> str:
    """The reference's answer string of one response (``""`` when it finds nothing)."""
    text = text.replace("\u043a\u0438", "")
    if "final answer is $" in text and "$. I hope" in text:
        pred = text.split("final answer is $", 1)[1].split("$. I hope", 1)[0].strip()
    elif "boxed" in text:
        pred = _after_last_boxed(text.split("boxed")[-1])
    elif "he answer is" in text:
        pred = text.split("he answer is")[-1].strip()
    elif "final answer is" in text:
        pred = text.split("final answer is")[-1].strip()
    elif "答案是" in text:
        pred = text.split("答案是")[1].strip().split("\n\n")[0].strip()
    else:
        numbers = _NUMBER.findall(text.replace(",", ""))
        pred = numbers[-1] if numbers else ""
    return finish_answer(pred)


def finish_answer(pred: str) -> str:
    """The reference's clean-up of an extracted answer, then :func:`strip_string`."""
    if len(pred) > MAX_ANSWER_CHARS:
        return pred
    pred = re.sub(r"\n\s*", "", pred)
    if pred.startswith(":"):
        pred = pred[1:]
    if pred.endswith("."):
        pred = pred[:-1]
    if pred.endswith("/"):
        pred = pred[:-1]
    return strip_string(pred)


def _after_last_boxed(rest: str) -> str:
    """The box's content: balanced braces (to the end if unclosed), or up to the next ``$``."""
    if not rest.startswith("{"):
        return rest.split("$")[0].strip()
    depth = 1
    for i, c in enumerate(rest[1:], start=1):
        depth += (c == "{") - (c == "}")
        if depth == 0:
            return rest[1:i]
    return rest[1:]


def strip_string(s: str) -> str:
    """Qwen's normaliser (``strip_string`` of qwen_math_parser.py, units not skipped)."""
    s = s.strip().replace("\n", "").rstrip(".").replace("\\!", "")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    for old, new in (("\\left", ""), ("\\right", ""), ("\\{", "{"), ("\\}", "}")):
        s = s.replace(old, new)
    unit_free = re.sub(r"\\text{.*?}$", "", s).strip()  # a trailing \text{...} is a unit
    if unit_free:
        s = unit_free
    s = _strip_units(s)
    for dropped in ("^{\\circ}", "^\\circ", "\\$", "$", "\\(", "\\)"):
        s = s.replace(dropped, "")
    s = _word_number(s)
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for prefix in _VARIABLE_PREFIXES:
        s = s.replace(prefix, "")
    s = s.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}")
    s = s.replace("\\%", "").replace("%", "").replace(" .", " 0.").replace("{.", "{0.")
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("+\\inity", "\\infty").replace("and", "").replace("\\mathbf", "")
    s = re.sub(r"\\mbox{.*?}", "", s)
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = re.sub(r"(\d+)\.0*([^\d])", r"\1\2", s)
    s = re.sub(r"(\d+)\.0*$", r"\1", s)
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    parts = s.split("=")
    if len(parts) == 2 and len(parts[0]) <= 2:  # "k = 5" -> "5"
        s = parts[1]
    s = re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s).replace(" ", "")
    return fix_a_slash_b(fix_fracs(s), sqrt_ok=True)


def _strip_units(s: str) -> str:
    for _ in range(2):
        for pattern in UNIT_PATTERNS:
            stripped = pattern.sub(r"\1\2", s)
            if stripped:  # a string that is all unit stays as it is
                s = stripped
    return s


def _word_number(s: str) -> str:
    """A digit string as its int; a text with one number word as that number (module docstring)."""
    if s.isdigit():
        try:
            return str(int(s))
        except ValueError:  # digits Python's int() refuses (superscripts)
            return s
    words = [w for w in s.replace("-", " ").lower().split() if w in _NUMBER_WORDS]
    return _NUMBER_WORDS[words[0]] if len(words) == 1 else s


def fix_fracs(s: str, *, strict: bool = False) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{72}`` -> ``\\frac{1}{72}``.

    ``strict``: the MATH normaliser's variant, which fails (``ValueError``) on a ``\\frac`` that
    ends the string, where Qwen's keeps it.
    """
    pieces = s.split("\\frac")
    out = pieces[0]
    for piece in pieces[1:]:
        out += "\\frac"
        if not piece and strict:
            raise ValueError("\\frac at the end")
        if not piece or piece[0] == "{":
            out += piece
        elif len(piece) < 2:
            return s
        elif piece[1] != "{":
            out += "{" + piece[0] + "}{" + piece[1] + "}" + piece[2:]
        else:
            out += "{" + piece[0] + "}" + piece[1:]
    return out


_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")


def fix_a_slash_b(s: str, *, sqrt_ok: bool) -> str:
    """``a/b`` of two plainly written ints -> ``\\frac{a}{b}`` (Qwen's also lets a side hold
    ``sqrt`` verbatim: ``sqrt_ok``)."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    if all((sqrt_ok and "sqrt" in p) or _CANONICAL_INT.fullmatch(p) for p in parts):
        return "\\frac{" + parts[0] + "}{" + parts[1] + "}"
    return s
