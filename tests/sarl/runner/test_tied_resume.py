"""A resumed model with tied embeddings gets back exactly the saved weights, and the Trainer's
"missing keys ['lm_head.weight']" warning, expected there, is not printed; others still are.

A real transformers ``Trainer`` trains a tiny tied Qwen3 (the built-in policy's architecture)
one step and checkpoints it; a second Trainer, on a differently initialised model, resumes from
that checkpoint (it is already at ``max_steps``, so nothing trains after the load).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sarl.runner.tied_weights import quiet_tied_missing_keys  # noqa: E402


def _model(seed: int) -> Any:
    config = transformers.Qwen3Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(config)


def _trainer(model: Any, out: Path) -> Any:
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=1,
        save_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        save_only_model=False,
    )
    rows = [{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]} for _ in range(4)]
    return transformers.Trainer(model=model, args=args, train_dataset=rows)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def warnings_seen() -> Iterator[Records]:
    """Warnings of the Trainer's logger (transformers' loggers do not propagate to the root)."""
    records = Records()
    logger = logging.getLogger("transformers.trainer")
    logger.addHandler(records)
    yield records
    logger.removeHandler(records)


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    trainer = _trainer(_model(seed=0), tmp_path / "first")
    trainer.train()
    saved = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return tmp_path / "first" / "checkpoint-1", saved


def _resume(checkpoint: Path, out: Path) -> Any:
    trainer = _trainer(_model(seed=1), out)
    with quiet_tied_missing_keys(trainer.model):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    return trainer.model


def test_resumed_tied_weights_equal_the_saved_ones_without_the_warning(
    checkpoint: tuple[Path, dict[str, Any]], tmp_path: Path, warnings_seen: Records
) -> None:
    path, saved = checkpoint
    model = _resume(path, tmp_path / "second")
    restored = model.state_dict()
    assert set(restored) == set(saved)
    different = [k for k in saved if not torch.equal(restored[k], saved[k])]
    assert not different
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still one tensor
    assert not [m for m in warnings_seen.messages if "missing keys" in m]


def test_other_missing_keys_still_warn(
    checkpoint: tuple[Path, dict[str, Any]], tmp_path: Path, warnings_seen: Records
) -> None:
    from safetensors.torch import load_file, save_file

    path, _ = checkpoint
    weights = path / "model.safetensors"
    state = load_file(str(weights))
    dropped = next(k for k in state if k.endswith("post_attention_layernorm.weight"))
    del state[dropped]
    save_file(state, str(weights), metadata={"format": "pt"})
    _resume(path, tmp_path / "second")
    assert any(dropped in m and "missing keys" in m for m in warnings_seen.messages)
