"""LaTeX of a final answer as plain text, the subset of pylatexenc's ``latex2text`` that TTRL's
grader relies on (a pure function, no dependency).

Called by :mod:`sarl.rewards.baselines.ttrl_grade` (PRM800K's ``_normalize`` turns LaTeX into text
with ``pylatexenc.latex2text.LatexNodes2Text().latex_to_text`` before comparing or handing it to
SymPy). Outputs checked against pylatexenc 2.11: ``\\frac{a+b}{c}`` -> ``a+b/c`` (no
parentheses), ``\\sqrt{3}`` and ``\\sqrt[3]{3}`` -> ``√(3)``, ``\\pi`` -> ``π``, ``\\infty`` ->
``∞``, ``\\cdot`` -> ``·``, ``\\times`` -> ``×``, ``\\le`` -> ``≤``, ``\\ne`` -> nothing,
``\\text{yes}`` -> ``yes``, ``\\sin x`` -> ``sinx`` (spaces after a macro name go), braces go,
``\\{`` -> ``{``, an unknown macro goes and keeps its argument (``\\foo{3}`` -> ``3``). Not
reproduced: environments (``\\begin{pmatrix}`` renders as ``[ 1; 2 ]`` there) and symbols outside
the table below (they are dropped here).
"""

from __future__ import annotations

import re
import unicodedata

_TOKEN = re.compile(r"\\([A-Za-z]+)\s*|\\(.)|([{}])|\[|\]|([^\\{}\[\]]+)", re.DOTALL)
_SYMBOLS = {
    "pi": "π", "infty": "∞", "cdot": "·", "times": "×", "cup": "∪", "cap": "∩", "le": "≤",
    "ge": "≥", "leq": "≤", "geq": "≥", "ne": "", "neq": "", "pm": "±", "mp": "∓", "circ": "∘",
    "in": "∈", "to": "→", "emptyset": "∅", "dots": "…", "ldots": "…", "cdots": "⋯", "mid": "|",
    "angle": "∠", "approx": "≈", "div": "÷", "quad": "  ", "qquad": "    ", "degree": "",
    "left": "", "right": "", "sin": "sin", "cos": "cos", "tan": "tan", "log": "log", "ln": "ln",
    "exp": "exp", "min": "min", "max": "max",
}  # fmt: skip
_ESCAPES = {"{": "{", "}": "}", "%": "%", "$": "$", ",": " ", ";": " ", ":": " ", " ": " ",
            "!": "", "\\": "\n", "&": "&", "_": "_", "#": "#"}  # fmt: skip
_BLACKBOARD = {"R": "ℝ", "N": "ℕ", "Z": "ℤ", "Q": "ℚ", "C": "ℂ"}


Token = tuple[str, str]  # (kind, value): macro, escape, open, close, lbracket, rbracket, text


def _tokens(latex: str) -> list[Token]:
    out: list[Token] = []
    for m in _TOKEN.finditer(latex):
        if m[1] is not None:
            out.append(("macro", m[1]))
        elif m[2] is not None:
            out.append(("escape", m[2]))
        elif m[3] is not None:
            out.append(("open" if m[3] == "{" else "close", m[3]))
        elif m[4] is not None:
            out.append(("text", m[4].replace("$", "")))  # $: math-mode delimiters
        else:
            out.append(("lbracket" if m[0] == "[" else "rbracket", m[0]))
    return out


def latex_to_text(latex: str) -> str:
    """Plain text of ``latex`` (see the module docstring for what is covered)."""
    return _render(_tokens(latex), 0, stop_at_close=False)[0]


def _render(tokens: list[Token], i: int, *, stop_at_close: bool) -> tuple[str, int]:
    """Text of tokens from ``i`` up to the closing brace (if ``stop_at_close``) or the end."""
    out: list[str] = []
    while i < len(tokens):
        kind, value = tokens[i]
        i += 1
        if kind == "close":
            if stop_at_close:
                break
        elif kind == "open":
            inner, i = _render(tokens, i, stop_at_close=True)
            out.append(inner)
        elif kind == "macro":
            text, i = _macro(value, tokens, i)
            out.append(text)
        elif kind == "escape":
            out.append(_ESCAPES.get(value, ""))
        else:
            out.append(value)
    return "".join(out), i


def _argument(tokens: list[Token], i: int) -> tuple[str, int]:
    """A macro's argument: a braced group, or the first character of a text run (the rest of
    the run stays for what follows)."""
    if i >= len(tokens):
        return "", i
    kind, value = tokens[i]
    if kind == "open":
        return _render(tokens, i + 1, stop_at_close=True)
    if kind == "text" and value.strip():
        run = value.lstrip()
        tokens[i] = ("text", run[1:])
        return run[0], i
    return _render(tokens[i : i + 1], 0, stop_at_close=False)[0], i + 1


def _macro(name: str, tokens: list[Token], i: int) -> tuple[str, int]:
    if name in _SYMBOLS:
        return _SYMBOLS[name], i
    if (greek := _greek(name)) is not None:
        return greek, i
    if name == "sqrt":
        if i < len(tokens) and tokens[i][0] == "lbracket":  # \sqrt[n]{x}: the index is dropped
            while i < len(tokens) and tokens[i][0] != "rbracket":
                i += 1
            i += 1
        arg, i = _argument(tokens, i)
        return f"√({arg})", i
    if name == "mathbb":
        arg, i = _argument(tokens, i)
        return _BLACKBOARD.get(arg, arg), i
    if name in ("frac", "dfrac", "tfrac"):
        num, i = _argument(tokens, i)
        den, i = _argument(tokens, i)
        return f"{num}/{den}", i
    return "", i  # \text, \mathrm, \overline, \boxed, unknown: the argument renders as a group


def _greek(name: str) -> str | None:
    case = "CAPITAL" if name[0].isupper() else "SMALL"
    letter = {"lambda": "LAMDA"}.get(name.lower(), name.upper())
    try:
        return unicodedata.lookup(f"GREEK {case} LETTER {letter}")
    except KeyError:
        return None
