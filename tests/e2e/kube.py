"""Helpers of the end-to-end tests (tests/e2e/test_cluster.py, test_study.py): a fresh object
name that is cleaned up, polling until something appears or goes, and reading any object of the
cluster with the dynamic client."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
TIMEOUT_S = 180.0


def poll(what: str, fn: Callable[[], T | None], timeout: float = TIMEOUT_S) -> T:
    """``fn()`` until it returns something other than None/False, else fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = fn()
        if out is not None and out is not False:
            return out
        time.sleep(2)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}")


def get(api: Any, api_version: str, kind: str, namespace: str, obj_name: str) -> Any:
    """The object as a dict, or None if there is none of that name."""
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import NotFoundError

    res = dynamic.DynamicClient(api).resources.get(api_version=api_version, kind=kind)
    try:
        return res.get(name=obj_name, namespace=namespace).to_dict()
    except NotFoundError:
        return None


def gone(api: Any, api_version: str, kind: str, namespace: str, obj_name: str) -> bool:
    return get(api, api_version, kind, namespace, obj_name) is None


def fresh_name(delete: Callable[[str], object], missing: type[Exception]) -> Iterator[str]:
    """A new ``e2e-XXXXXX`` name (for a ``name`` fixture); ``delete(name)`` afterwards, unless
    the test already deleted it (``missing`` raised)."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    yield name
    with contextlib.suppress(missing):  # already deleted by the test
        delete(name)
