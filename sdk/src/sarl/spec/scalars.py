"""Refuse what YAML would construct silently or crash on: duplicate keys, huge integers, inf/nan.

Called by :mod:`sarl.spec.documents` on every spec or values document it parses (spec files,
YAML text, each ``--set`` VALUE, ``sarl reward score --settings``) on the composed node tree,
before anything is constructed, and on documents given as Python objects (the operator,
:class:`sarl.Client`). Pure: each function returns the problem as ``(path, line, problem)`` or
``None``; the caller words the error.

* A key written twice in one mapping: PyYAML keeps the last one silently, so a second
  top-level ``spec:`` dropped the whole first spec (issue 38 item 9). The line of the second
  occurrence and of the first are named. Merge keys (``<<: *base``) are YAML's own override
  mechanism and are not duplicates.
* An integer outside signed 64 bits: a CRD's ``integer`` is an int64 in the API server, so no
  spec field can take a larger one, and Python refuses to parse one of more than 4,300 decimal
  digits (``sys.int_info.str_digits_check_threshold``, CPython 3.11+) with a ``ValueError``
  that PyYAML's ``construct_yaml_int`` lets through as a traceback.
* A float that is not finite (``.inf``, ``.nan``, ``1e999``): no spec field means infinity,
  and JSON (the API server's wire format) cannot carry one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

INT_MAX = 2**63 - 1
INT_MIN = -(2**63)
#: Characters of an integer scalar past which it cannot be within 64 bits in any YAML 1.1
#: spelling short of zero padding (a binary int64 is 66 characters with its ``0b``).
_MAX_INT_CHARS = 100
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"

Loc = tuple[str | int, ...]
Problem = tuple[Loc, int, str]


def int_problem(value: int) -> str | None:
    """Why an integer cannot be a spec value (outside signed 64 bits), else None."""
    if INT_MIN <= value <= INT_MAX:
        return None
    # str() of an int past 4,300 digits (about 14,000 bits) is the ValueError being avoided.
    bits = value.bit_length()
    size = f"{len(str(abs(value))):,}" if bits < 14_000 else f"about {int(bits * math.log10(2)):,}"
    return (
        f"an integer of {size} digits, outside 64 bits; spec integers are at most "
        f"{INT_MAX:,} in size"
    )


def float_problem(value: float) -> str | None:
    """Why a float cannot be a spec value (not finite), else None."""
    if math.isfinite(value):
        return None
    return f"{value} is not a finite number; write a finite value (no .inf, .nan or 1e999)"


def scalar_problem(node: ScalarNode, construct: Callable[[ScalarNode], Any]) -> str | None:
    """The problem of one resolved int or float scalar; ``construct`` is the loader's
    constructor for the node's tag (only called once the text is short enough to parse)."""
    if node.tag == _INT_TAG:
        digits = sum(c.isalnum() for c in node.value)
        if len(node.value) > _MAX_INT_CHARS:
            return (
                f"an integer of {digits:,} digits, outside 64 bits; spec integers are at most "
                f"{INT_MAX:,} in size"
            )
        return int_problem(construct(node))
    if node.tag == _FLOAT_TAG:
        return float_problem(construct(node))
    return None


def _key_name(node: Node) -> str | int:
    """A mapping key as the path shows it (a scalar's text; another node's kind)."""
    if isinstance(node, ScalarNode):
        return str(node.value)
    return f"<{type(node).__name__.removesuffix('Node').lower()} key>"


def _duplicate(pairs: list[tuple[Node, Node]], loc: Loc) -> Problem | None:
    """The second occurrence of a key in one mapping's ``pairs``, with both lines."""
    seen: dict[tuple[str, str], int] = {}
    for key, _ in pairs:
        if not isinstance(key, ScalarNode) or key.tag == _MERGE_TAG:
            continue
        line = key.start_mark.line + 1
        first = seen.get((key.tag, key.value))
        if first is not None:
            return (
                (*loc, key.value),
                line,
                f"duplicate key (first at line {first}); YAML would keep only the last, "
                "silently: merge the two into one",
            )
        seen[(key.tag, key.value)] = line
    return None


def node_problem(root: Node, construct: Callable[[ScalarNode], Any]) -> Problem | None:
    """The first duplicate key, huge integer or non-finite float in a composed document.

    Aliased nodes are walked each time they are reached; the composer has already bounded the
    expanded size (:data:`sarl.spec.documents.MAX_NODES`), so the walk is bounded too."""
    stack: list[tuple[Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if isinstance(node, ScalarNode):
            problem = scalar_problem(node, construct)
            if problem is not None:
                return loc, node.start_mark.line + 1, problem
        elif isinstance(node, MappingNode):
            dup = _duplicate(node.value, loc)
            if dup is not None:
                return dup
            stack.extend((v, (*loc, _key_name(k))) for k, v in reversed(node.value))
            stack.extend((k, loc) for k, _ in node.value)  # a key can be a huge int too
        elif isinstance(node, SequenceNode):
            stack.extend((v, (*loc, i)) for i, v in reversed(list(enumerate(node.value))))
    return None


def value_problem(value: Any) -> str | None:
    """The problem of one Python value given as a document's leaf (bool is not an int here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int_problem(value)
    if isinstance(value, float):
        return float_problem(value)
    return None
