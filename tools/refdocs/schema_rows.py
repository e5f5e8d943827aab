"""Flatten a JSON schema (pydantic's, a Helm values schema, a CRD's) into one row per field.

Used by the spec, rewards, CRD and Helm pages of tools.refdocs. A field's row carries its
dotted path (``spec.model.name``; ``[]`` for list items, ``<key>`` for map values), a type
readable by a user, its default and its description; a nested model gets its own rows below its
field. A field without a description, on the field or on the model it refers to, is *missing*:
the tests in tests/docs fail on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]
_NO_DEFAULT = object()


@dataclass(frozen=True)
class Row:
    """One documented field."""

    path: str
    type: str
    default: object  # _NO_DEFAULT when the schema gives none
    required: bool
    description: str

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


def _defs(schema: Schema) -> Schema:
    # pydantic writes $defs (draft 2020-12); Helm value schemas use draft-07's definitions.
    return {**schema.get("definitions", {}), **schema.get("$defs", {})}


def resolve(node: Schema, defs: Schema) -> tuple[Schema, str | None]:
    """Follow ``$ref`` (siblings win over the target's keys); the last name followed, if any."""
    name: str | None = None
    while "$ref" in node:
        name = str(node["$ref"]).rpartition("/")[2]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**defs[name], **siblings}
    return node, name


def _variants(node: Schema) -> list[Schema]:
    return list(node.get("anyOf") or node.get("oneOf") or [])


def type_name(node: Schema, defs: Schema) -> str:
    """A short type: ``string``, ``integer ≥ 1``, ``list[RewardTerm]``, ``"a" | "b"``..."""
    if "$ref" in node:
        target, name = resolve(node, defs)
        return name if name and "properties" in target else type_name(target, defs)
    if variants := _variants(node):
        return " | ".join(type_name(v, defs) for v in variants)
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    if "const" in node:
        return json.dumps(node["const"])
    kind = node.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(kind)
    if kind == "array":
        return f"list[{type_name(node.get('items', {}), defs)}]"
    extra = node.get("additionalProperties")
    if kind == "object" and isinstance(extra, dict):
        return f"map[string, {type_name(extra, defs)}]"
    return str(kind) + _bounds(node)


def _bounds(node: Schema) -> str:
    marks = [
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
    ]
    return "".join(
        f" {sign} {node[key]}" for key, sign in marks if isinstance(node.get(key), int | float)
    )


def description(node: Schema, defs: Schema) -> str:
    """The field's own description, else the one of the model it refers to."""
    if node.get("description"):
        return str(node["description"])
    target, _ = resolve(node, defs)
    if target.get("description"):
        return str(target["description"])
    for variant in _variants(target):
        if variant.get("type") != "null" and (text := description(variant, defs)):
            return text
    return ""


def _children(node: Schema, defs: Schema, path: str) -> list[tuple[Schema, str]]:
    """The object schemas a field's value may hold, each with the path its fields hang under."""
    node, _ = resolve(node, defs)
    out: list[tuple[Schema, str]] = []
    for variant in _variants(node):
        out += _children(variant, defs, path)
    if "properties" in node:
        out.append((node, path))
    if isinstance(node.get("items"), dict):
        out += _children(node["items"], defs, f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _children(node["additionalProperties"], defs, f"{path}.<key>")
    return out


def rows(schema: Schema, prefix: str = "") -> list[Row]:
    """Every field of ``schema``, depth first, nested models below their field."""
    defs = _defs(schema)
    out: list[Row] = []

    def walk(node: Schema, path: str, seen: tuple[int, ...]) -> None:
        required = set(node.get("required", []))
        for name, child in node.get("properties", {}).items():
            here = f"{path}.{name}" if path else name
            default = child.get("default", _NO_DEFAULT)
            text = description(child, defs)
            out.append(Row(here, type_name(child, defs), default, name in required, text))
            for target, sub in _children(child, defs, here):
                if id(target) not in seen:  # a recursive model is listed once
                    walk(target, sub, (*seen, id(target)))

    root, _ = resolve(schema, defs)
    walk(root, prefix, ())
    return out


def missing(found: list[Row], where: str) -> list[str]:
    """``where: path`` for every row without a description."""
    return [f"{where}: {row.path}" for row in found if not row.description.strip()]
