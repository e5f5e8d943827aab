"""Fixtures of the causal-LM embedder tests: the warm-started tiny policy, loaded once."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sarl.embedding import tiny_policy


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return tiny_policy.prepare(tmp_path_factory)


@pytest.fixture(scope="module")
def tiny_lm(tiny_policy_dir: Path) -> tuple[Any, Any]:
    """(model, tokenizer) of the tiny policy; model in train mode, as a trainer holds it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir)
    model.train()
    return model, tokenizer


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    # Only where torch is already in use: the HTTP client tests need not import it.
    if "torch" not in sys.modules:
        yield
        return
    with tiny_policy.one_torch_thread():
        yield
