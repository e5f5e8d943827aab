"""Model shapes: parameter counts against the model cards, config.json reading, name matching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sarl.plan.shapes import KNOWN, from_config, shape_of


@pytest.mark.parametrize(
    ("model", "total", "non_embedding"),
    [
        # The figures each model card states ("Number of Parameters", "(Non-Embedding)"), which
        # round to one or two digits.
        ("qwen/qwen3-0.6b", 0.6, 0.44),
        ("qwen/qwen3-1.7b", 1.7, 1.4),
        ("qwen/qwen3-4b", 4.0, 3.6),
        ("qwen/qwen3-8b", 8.2, 6.95),
        ("qwen/qwen3-14b", 14.8, 13.2),
        ("qwen/qwen2.5-1.5b-instruct", 1.54, 1.31),
        ("qwen/qwen2.5-7b-instruct", 7.61, 6.53),
    ],
)
def test_parameters_match_the_model_cards(model: str, total: float, non_embedding: float) -> None:
    shape = KNOWN[model]
    assert shape.parameters / 1e9 == pytest.approx(total, abs=0.05)
    assert (shape.parameters - shape.embedding_parameters) / 1e9 == pytest.approx(
        non_embedding, abs=0.05
    )


def test_kv_bytes_of_qwen3_4b() -> None:
    # 2 (k, v) x 36 layers x 8 kv heads x 128 dims x 2 bytes
    assert KNOWN["qwen/qwen3-4b"].kv_bytes_per_token == 147_456


@pytest.mark.parametrize(
    "name",
    ["Qwen/Qwen3-4B", "hf://Qwen/Qwen3-4B", "s3://models/Qwen3-4B", "pvc://weights/hub/Qwen3-4B"],
)
def test_sources_keep_the_hub_name(name: str) -> None:
    assert shape_of(name) == KNOWN["qwen/qwen3-4b"]


def test_local_config_is_read(tmp_path: Path) -> None:
    config = {
        "model_type": "qwen3",
        "hidden_size": 2560,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 9728,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert shape_of(str(tmp_path), read_local=True) == from_config(config)
    assert from_config(config) == KNOWN["qwen/qwen3-4b"]
    # The operator, the webhook and `sarl submit` never open a path a spec names.
    assert shape_of(str(tmp_path)) is None


def test_unknown_and_unreadable_models_have_no_shape(tmp_path: Path) -> None:
    assert shape_of("someone/unknown-model") is None
    (tmp_path / "config.json").write_text("{not json")
    assert shape_of(str(tmp_path), read_local=True) is None
