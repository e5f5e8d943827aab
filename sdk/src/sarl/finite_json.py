"""Parse JSON as the reward contract defines it: RFC 8259 numbers only, no NaN or Infinity.

Python's ``json.loads`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` and turns a number too
large for a double (``1e309``) into ``inf`` (``json/decoder.py``, ``parse_constant`` and
``float``); the reward and embedding services decode with orjson, which refuses all three with
400. So that a line the CLI scores is a request the service accepts, and the reverse, the CLI
(:func:`sarl.cli.lines.decode_json`, for ``sarl reward score`` and ``sarl reward diagnose``)
parses with :func:`loads`, and the services can check decoded bodies with
:func:`require_finite`: both refuse a non-finite number naming its field, e.g.
``requests[0].score: expected a finite number, got NaN``.
"""

from __future__ import annotations

import json
import math
from typing import Any


class NonFiniteNumber(ValueError):
    """A JSON document holds NaN or an infinity; the message names the field."""


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN, Infinity and overflowing numbers (:class:`NonFiniteNumber`);
    other errors are ``json.loads``' own."""
    obj = json.loads(text)
    require_finite(obj)
    return obj


def require_finite(obj: Any) -> None:
    """Raise :class:`NonFiniteNumber` naming the first field (``a.b[2]``) holding a non-finite
    float; walks lists of numbers at C speed (``math.fsum`` is finite only if every item is)."""
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _refuse(path, value)
        elif isinstance(value, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in value.items())
        elif isinstance(value, list) and not _all_finite_numbers(value):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(value))))


def _all_finite_numbers(items: list[Any]) -> bool:
    try:
        return math.isfinite(math.fsum(items))  # TypeError for lists of anything but numbers
    except (TypeError, OverflowError, ValueError):  # OverflowError: finite items, infinite sum
        return False


def _refuse(path: str, value: float) -> NonFiniteNumber:
    token = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return NonFiniteNumber(
        f"{path or 'document'}: expected a finite number, got {token} (JSON has no NaN or "
        "Infinity, and a number past 1.8e308 overflows); send a finite number or null"
    )
