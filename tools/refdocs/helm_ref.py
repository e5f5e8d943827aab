"""reference/helm-values.md: every value of each chart, with its type, default and description.

The description is the comment block directly above the key in the chart's ``values.yaml``
(helm-docs' ``# --`` convention, the marker dropped); the type comes from ``values.schema.json``,
the default from ``values.yaml`` itself. A key the schema allows but ``values.yaml`` leaves out
is listed with the schema's description. A value is *missing* when neither it nor a parent key has
a description (the rule of tests/charts/test_values_documented.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.refdocs.markdown import code, literal, page, table
from tools.refdocs.schema_rows import Schema, description, resolve, type_name

CHARTS = ("sarl-platform", "sarl-inference")
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")


@dataclass(frozen=True)
class Value:
    """One key of values.yaml: dotted path, own comment, whether a parent has one."""

    path: str
    comment: str
    inherited: bool


def _comment(block: list[str]) -> str:
    text = " ".join(line.lstrip("#").strip() for line in block)
    return text.removeprefix("--").strip()


def values_with_comments(text: str) -> list[Value]:
    """Every key of a values.yaml, in file order, with the comment block right above it."""
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented)
    block: list[str] = []
    out: list[Value] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped)
            continue
        match = _KEY.match(line)
        if match:
            indent = len(match["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            inherited = any(documented for _, _, documented in stack)
            comment = _comment(block)
            stack.append((indent, match["key"], bool(comment) or inherited))
            out.append(Value(".".join(k for _, k, _ in stack), comment, inherited))
        if not stripped.startswith("- "):  # a list item's lines keep the comment above its key
            block = []
    return out


def _lookup(schema: Schema, path: str, defs: Schema) -> Schema | None:
    node: Schema | None = schema
    for key in path.split("."):
        if node is None:
            return None
        node, _ = resolve(node, defs)
        node = node.get("properties", {}).get(key)
    return node


def _get(values: Any, path: str) -> Any:
    for key in path.split("."):
        values = values[key]
    return values


def _schema_only(schema: Schema, defs: Schema, known: set[str], prefix: str = "") -> list[str]:
    """Paths the schema allows (through objects) that values.yaml does not set."""
    node, _ = resolve(schema, defs)
    out: list[str] = []
    for key, child in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        if path not in known:
            out.append(path)
        out += _schema_only(child, defs, known, f"{path}.")
    return out


def chart_section(chart_dir: Path) -> tuple[str, list[str]]:
    """One chart's table and its values without a description."""
    text = (chart_dir / "values.yaml").read_text(encoding="utf-8")
    schema: Schema = json.loads((chart_dir / "values.schema.json").read_text(encoding="utf-8"))
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    values = yaml.safe_load(text)
    found = values_with_comments(text)
    rows: list[tuple[str, str, str, str]] = []
    missing: list[str] = []
    for value in found:
        node = _lookup(schema, value.path, defs) or {}
        default = _get(values, value.path)
        shown = "" if isinstance(default, dict) and default else literal(default)
        text_ = value.comment or (description(node, defs) if node else "")
        if not text_ and value.inherited:
            text_ = "See the parent key."
        if not text_ and isinstance(default, dict) and default:
            text_ = "The keys below."  # a group: its keys carry the descriptions
        if not text_:
            missing.append(f"helm {chart_dir.name}: {value.path}")
        rows.append((code(value.path), type_name(node, defs) if node else "", shown, text_))
    for path in _schema_only(schema, defs, {v.path for v in found}):
        node = _lookup(schema, path, defs) or {}
        parent_documented = any(path.startswith(f"{v.path}.") for v in found if v.comment)
        text_ = description(node, defs) or ("See the parent key." if parent_documented else "")
        if not text_:
            missing.append(f"helm {chart_dir.name}: {path}")
        rows.append((code(path), type_name(node, defs), "(unset)", text_))
    title = f"## {chart_dir.name}\n\n{schema.get('description', '')}"
    return f"{title}\n\n{table(('Value', 'Type', 'Default', 'Description'), rows)}", missing


def helm_page(root: Path) -> tuple[str, list[str]]:
    """The page (both charts) and the values without a description."""
    sections: list[str] = []
    missing: list[str] = []
    for chart in CHARTS:
        section, lacking = chart_section(root / "charts" / chart)
        sections.append(section)
        missing += lacking
    intro = (
        "Every value of the two Helm charts, from their `values.yaml` (defaults and comments) "
        "and `values.schema.json` (types; `helm install` refuses unknown keys and wrong types "
        "with the key's name). Credentials are never values: they are references to Secrets."
    )
    return page("Helm values", intro, sections), missing
