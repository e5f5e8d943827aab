"""Fixtures shared by the local-run tests: one cache of warm-started tiny policies per session.

Every module that trains makes its own workdir; its ``cache`` links to this session's cache, so
the policy their specs share (same data, model and response budget) is built once (1-2 minutes on
a CPU) instead of once per module. The tiny-policy builder locks each entry while building it.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("policy-cache")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, policy_cache: Path) -> Path:
    """A workdir for one module, with the shared policy cache as its ``cache``."""
    path = tmp_path_factory.mktemp("sarl-workdir")
    (path / "cache").symlink_to(policy_cache, target_is_directory=True)
    return path
