"""Validating built objects against the upstream CRDs vendored under ``fixtures/upstream/``:
:func:`strict` turns a CRD's ``openAPIV3Schema`` into one that refuses unknown fields, as the
API server prunes them (a field the CRD does not know would be silently dropped there). Used by
``test_trainjob.py`` and ``test_scheduling_builders.py``."""

from __future__ import annotations

from typing import Any


def strict(node: Any) -> Any:
    """``node`` with ``additionalProperties: false`` wherever it lists properties and does not
    preserve unknown fields: a field the CRD does not know fails validation."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out
