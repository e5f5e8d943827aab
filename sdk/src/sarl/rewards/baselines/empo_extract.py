"""EMPO's answer extraction: math-verify's ``parse`` as the authors' math reward calls it.

Reference: ``get_empo_math_reward`` in ``trl/src/open_r1/rewards.py`` of
github.com/QingyangZhang/EMPO at c5eccd4 (math-verify pinned to 0.5.2 by ``trl/setup.py``). Each
completion goes through ``parse`` with one ``LatexExtractionConfig`` (boxed answers first,
``boxed_match_priority=0``; no anchor-free extraction; normalisation of units, equations and all
boxes) in ``first_match`` mode; the answer is the last element of what ``parse`` returns (the
matched LaTeX string), ``""`` when it returns nothing, then the reference's
``normalize_prediction`` (Lewkowycz et al. 2022, appendix D: ``\\text{..}`` unwrapped, an outer
``\\boxed{..}`` unwrapped). So "The final answer is $3$" gives ``3``, ``\\boxed{5\\text{ cm}}``
gives ``5``, and an empty ``\\boxed{}``, ``\\boxed 5`` or "The answer is 7" give ``""`` (no
answer).

:func:`parse_answer` runs in a math-verify worker subprocess (``extract`` requests of
:mod:`sarl.rewards.baselines.math_verify_pool`, whose docstring says why); :func:`normalize_answer`
is pure and runs in the caller. Used by the ``empo`` reward (:mod:`.empo`).
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any

# normalize_prediction of the reference: re.sub over single lines (no DOTALL), \text{} first
# (shortest), then \boxed{ to the line's last }.
_TEXT = re.compile(r"\\text\{(.*?)\}")
_BOXED = re.compile(r"\\boxed\{(.*)\}")


@functools.cache
def _extraction_config() -> list[Any]:
    """The reference's extraction config, built once per worker (math-verify imported lazily)."""
    mv: Any = importlib.import_module("math_verify")
    l2s: Any = importlib.import_module("latex2sympy2_extended")
    normalization = l2s.NormalizationConfig(
        nits=False,
        malformed_operators=False,
        basic_latex=True,
        equations=True,  # deprecated in latex2sympy2_extended >= 1.0.9, still applied
        boxed="all",
        units=True,
    )
    return [
        mv.LatexExtractionConfig(
            normalization_config=normalization,
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]


def parse_answer(text: str) -> str:
    """The string math-verify extracts from ``text`` as EMPO calls it; ``""`` if none.

    math-verify's own timeout is off (``parsing_timeout=None``: it uses ``signal.alarm``); the
    worker's timer bounds the call. Needs math-verify (``sarl[math]``).
    """
    mv: Any = importlib.import_module("math_verify")
    result = mv.parse(
        text,
        extraction_config=_extraction_config(),
        extraction_mode="first_match",
        parsing_timeout=None,
    )
    # The reference takes result[0] when there is one element (math-verify then returns only
    # the string: its SymPy conversion failed) and result[-1] otherwise: the last one either way.
    return str(result[-1]) if result else ""


def normalize_answer(answer: str) -> str:
    """The reference's ``normalize_prediction``: ``\\text{x}`` -> ``x``, ``\\boxed{x}`` -> ``x``."""
    return _BOXED.sub(r"\1", _TEXT.sub(r"\1", answer))
