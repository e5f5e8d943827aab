"""Readable field paths and "did you mean" hints for spec errors.

Called by :mod:`sarl.spec.loader` (validation errors of Experiments and Studies),
:mod:`sarl.spec.study` (an arm's override), :mod:`sarl.spec.presets` (unknown preset names),
:mod:`sarl.rewards.registry` (reward names and settings, imported lazily there: the registry is
imported by the spec models) and :mod:`sarl.spec.overrides` (``--set`` paths). Pure: pydantic
models are only inspected, never built.

* :func:`path`: a pydantic ``loc`` as it is written in a document, ``spec.reward[0].name``.
* :func:`did_you_mean`: the closest valid name (:mod:`difflib`), worded for a message. Only valid
  names are ever suggested, so a hint cannot echo what the user typed (which may be a secret
  pasted in the wrong field).
* :func:`fields_at`: the field names of the model found at a path (what an unknown key could
  have meant).
* :func:`hint_for`: the hint of one pydantic error (unknown key, or a value outside a literal's
  choices), or an empty string.
* :class:`FieldError`: a validator's error about a field below the model it validates, so the
  loader can name that field instead of the whole object.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Final, Union, get_args, get_origin

from pydantic import BaseModel

from sarl.spec.secrets import describe_value, redact

#: A pydantic location: field names and list indexes from the document root.
Loc = Sequence[str | int]

# How close a typo must be to be suggested (difflib's ratio): 'structur' -> 'structure' is
# 0.94, 'grp' -> 'grpo' 0.86; unrelated words of similar length stay under 0.6.
_CUTOFF = 0.6
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
#: The ``value`` of a :class:`FieldError` (or a RewardConfigError) whose message shows no value:
#: an unknown key's value is not what is wrong.
NO_VALUE: Final[Any] = object()


class FieldError(ValueError):
    """A validator's error about the field ``field`` (a path relative to the model it validates,
    e.g. ``("preset",)``), whose value is ``value``; ``detail`` says what is wrong and the fix.

    ``str()`` is ``<field>=<value>: <detail>``, the value shown only as
    :func:`~sarl.spec.secrets.describe_value` allows."""

    def __init__(self, field: tuple[str | int, ...], value: Any, detail: str) -> None:
        self.field = field
        self.value = value
        self.detail = detail
        key = next((str(p) for p in reversed(field) if isinstance(p, str)), "")
        shown = "" if value is NO_VALUE else f"={describe_value(redact(value, key))}"
        super().__init__(f"{path(field)}{shown}: {detail}")


def path(loc: Iterable[Any]) -> str:
    """``("spec", "reward", 0, "name")`` -> ``spec.reward[0].name`` (indexes in brackets, as
    the secret refusals and Study errors write them)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def closest(word: Any, choices: Iterable[str]) -> str | None:
    """The valid name closest to ``word`` (case-insensitive), or None when none is close."""
    if not isinstance(word, str) or not word:
        return None
    options = [c for c in choices if c != word]
    by_lower = {c.lower(): c for c in options}
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=_CUTOFF)
    return by_lower[match[0]] if match else None


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """``"did you mean 'structure'?"`` for the closest valid name, or ``""``."""
    best = closest(word, choices)
    return f"did you mean {best!r}?" if best else ""


def with_hint(message: str, hint: str) -> str:
    """``message; hint`` (``message`` alone when there is no hint)."""
    return f"{message}; {hint}" if hint else message


def expected_choices(expected: str) -> list[str]:
    """The quoted choices of pydantic's ``ctx["expected"]`` (``"'grpo', 'rloo' or 'ppo'"``)."""
    return _QUOTED.findall(expected)


def fields_at(model: type[BaseModel], loc: Loc) -> list[str] | None:
    """The field names of the model at ``loc`` below ``model``, or None when ``loc`` leads to
    something that is not a model (a free mapping such as a reward's ``settings``)."""
    node: Any = model
    for part in loc:
        node = _child(node, part)
        if node is None:
            return None
    node = _model_of(node)
    return list(node.model_fields) if node is not None else None


def child_type(annotation: Any, part: str | int) -> Any:
    """The annotation of ``part`` (a field name or a list index) inside ``annotation``; None
    when ``annotation`` has no such part. ``Any`` for free mappings and untyped values."""
    return _child(annotation, part)


def _child(annotation: Any, part: str | int) -> Any:
    model = _model_of(annotation)
    if model is not None:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        return field.annotation if field is not None else None
    for arg in _members(annotation):
        origin = get_origin(arg)
        if origin in (list, tuple, Sequence) and isinstance(part, int):
            args = get_args(arg)
            return args[0] if args else Any
        if origin is dict and isinstance(part, str):
            args = get_args(arg)
            return args[1] if len(args) == 2 else Any
        if arg is Any:
            return Any
    return None


def _members(annotation: Any) -> list[Any]:
    """``X | None`` -> ``[X]``; ``Annotated[X, ...]`` -> ``[X]``; anything else -> ``[it]``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for a in get_args(annotation) if a is not type(None) for m in _members(a)]
    return [annotation]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for arg in _members(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def hint_for(error: Any, model: type[BaseModel] | None) -> str:
    """The "did you mean" hint of one pydantic error dict: for an unknown key, the closest
    field of the model at that place (``model`` is the root the ``loc`` starts from); for a
    value outside a literal's or an enum's choices, the closest choice."""
    loc = tuple(error.get("loc") or ())
    kind = error.get("type")
    if kind == "extra_forbidden" and loc and model is not None:
        fields = fields_at(model, loc[:-1])
        if not fields:
            return ""
        hint = did_you_mean(loc[-1], fields)
        return hint or f"known fields: {', '.join(fields)}"
    if kind in ("literal_error", "enum"):
        expected = (error.get("ctx") or {}).get("expected")
        if isinstance(expected, str):
            return did_you_mean(error.get("input"), expected_choices(expected))
    return ""


def unknown_field_message(error: Any, model: type[BaseModel] | None) -> str:
    """The message of an ``extra_forbidden`` error: ``unknown field; did you mean 'weight'?``."""
    return with_hint("unknown field", hint_for(error, model))


__all__ = [
    "NO_VALUE",
    "FieldError",
    "Loc",
    "child_type",
    "closest",
    "did_you_mean",
    "expected_choices",
    "fields_at",
    "hint_for",
    "path",
    "unknown_field_message",
    "with_hint",
]
