"""Fixtures of the dataset tests: a real local tokenizer directory (built once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sarl.datasets.fixtures import tokenizer_dir


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return tokenizer_dir(tmp_path_factory.mktemp("tokenizer"))
