"""MLflow params from a nested spec: :func:`flatten_params` and MLflow's size limits.

Called by the local runner (``Tracker.start(params=flatten_params(spec))``) and the tracker,
which cuts every param value to the limit. Secret-looking values are redacted here
(:func:`sarl.spec.secrets.redact`; validation refuses them, this is for any that slip through).
No MLflow import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sarl.spec.secrets import redact

# MLflow 3.17's limits (mlflow/utils/validation.py), copied so this module imports without MLflow;
# a test checks they still match the installed MLflow.
MAX_PARAM_VALUE_LENGTH = 6000  # MAX_PARAM_VAL_LENGTH
MAX_PARAMS_TAGS_PER_BATCH = 100  # MAX_PARAMS_TAGS_PER_BATCH
MAX_METRICS_PER_BATCH = 1000  # MAX_METRICS_PER_BATCH
_TRUNCATED = "...[truncated]"


def flatten_params(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested spec into MLflow params: ``{"a": {"b": [1, {"c": 2}]}}`` gives
    ``{"a.b.0": "1", "a.b.1.c": "2"}``.

    Conventions: mapping keys are sorted at every level (same spec, same order, whatever the YAML
    order); list items keep their order under their index; an empty mapping or list is one param
    ``"{}"``/``"[]"`` so it stays visible; ``None``/``True``/``False`` become
    ``null``/``true``/``false`` as in the YAML; other values ``str()``. Values longer than MLflow's
    limit (:data:`MAX_PARAM_VALUE_LENGTH`) are cut and end in ``...[truncated]``. Secret-looking
    values (a URL's ``user:password@``, token shapes, literals under keys such as ``password``)
    are redacted to ``***`` first.
    """
    out: dict[str, str] = {}
    _flatten_into(out, redact(d), prefix)
    return out


def _flatten_into(out: dict[str, str], value: Any, key: str) -> None:
    if isinstance(value, Mapping):
        if not value and key:
            out[key] = "{}"
        for k in sorted(value, key=str):
            _flatten_into(out, value[k], f"{key}.{k}" if key else str(k))
    elif isinstance(value, list | tuple):
        if not value:
            out[key] = "[]"
        for i, item in enumerate(value):
            _flatten_into(out, item, f"{key}.{i}")
    else:
        out[key] = param_value(value)


def param_value(value: object) -> str:
    """``value`` as an MLflow param string (YAML spelling of None/bools, cut to the limit)."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if len(text) > MAX_PARAM_VALUE_LENGTH:
        text = text[: MAX_PARAM_VALUE_LENGTH - len(_TRUNCATED)] + _TRUNCATED
    return text
