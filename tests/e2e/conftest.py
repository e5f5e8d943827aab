"""Fixtures shared by the end-to-end tests (tests/e2e/test_cluster.py, test_study.py): the
namespace they work in (``SARL_E2E_NAMESPACE``, default ``default``) and a ``ClusterClient``
for it. The tests skip unless KUBECONFIG is set (see tests/conftest.py)."""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.fixture
def namespace() -> str:
    return os.environ.get("SARL_E2E_NAMESPACE", "default")


@pytest.fixture
def cluster(namespace: str) -> Any:
    from sarl.cluster import ClusterClient

    return ClusterClient(namespace=namespace)
