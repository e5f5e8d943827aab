"""Mean pooling of one layer's hidden states (SARL v1 A.1, Implementation A) and the layer choice.

The paper leaves the layer open; the default is the middle of the stack (``num_hidden_layers //
2``, reasons in ``sarl.embedding.hidden_states``). Pooling must be the paper's formula
e_t = mean_j h^l_{t,j}, normalised, and leave the model exactly as it found it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sarl.embedding.base import EmbeddingError
from sarl.embedding.hidden_states import (
    DEFAULT_LAYER,
    inference_mode,
    num_hidden_layers,
    pool_layer,
    resolve_layer,
)

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("layer", "layers", "index"),
    [
        ("middle", 2, 1),
        ("middle", 28, 14),  # Qwen3-0.6B / 1.7B
        ("middle", 36, 18),  # Qwen3-4B
        ("middle", 1, 0),
        (0, 2, 0),  # token embeddings
        (2, 2, 2),  # last layer (after the final norm)
        (-1, 2, 2),
        (-3, 2, 0),
    ],
)
def test_resolve_layer(layer: Any, layers: int, index: int) -> None:
    assert resolve_layer(layer, layers) == index


@pytest.mark.parametrize("layer", [3, -4])
def test_resolve_layer_out_of_range_names_the_field(layer: int) -> None:
    with pytest.raises(EmbeddingError, match=r"embedder\.layer: .* 2 layers"):
        resolve_layer(layer, 2)


def test_default_layer_is_the_middle() -> None:
    assert DEFAULT_LAYER == "middle"


def _manual(model: Any, ids: list[int], positions: list[int], layer: int) -> np.ndarray:
    """The paper's formula written out: mean of hidden_states[layer] over the positions."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    vec = out.hidden_states[layer][0, positions].mean(dim=0).numpy()  # (dim,)
    return vec / np.linalg.norm(vec)


def test_pool_layer_is_the_mean_of_the_layer_over_the_positions(tiny_lm: tuple[Any, Any]) -> None:
    model, tokenizer = tiny_lm
    ids = tokenizer("<think>Compute 3 + 4 = 7.\n\nCheck: 7 - 4 = 3.</think>")["input_ids"]
    pools = [np.arange(1, 6), np.arange(8, len(ids) - 1)]
    for layer in range(num_hidden_layers(model) + 1):
        (rows,) = pool_layer(model, [ids], [pools], layer=layer, batch_size=4, pad_id=0)
        assert rows.dtype == np.float32
        for row, pool in zip(rows, pools, strict=True):
            assert np.allclose(row, _manual(model, ids, list(pool), layer), atol=1e-5)


def test_right_padding_does_not_change_a_sequence_s_vectors(tiny_lm: tuple[Any, Any]) -> None:
    model, tokenizer = tiny_lm
    texts = ["a", "Compute 3 + 4 = 7.", "Plan: 3 operations, one per step. Then 6 + 35 = 41."]
    seqs = [tokenizer(t)["input_ids"] for t in texts]
    pools = [[np.arange(len(s))] for s in seqs]
    alone = [
        pool_layer(model, [s], [p], layer=1, batch_size=1, pad_id=0)[0]
        for s, p in zip(seqs, pools, strict=True)
    ]
    together = pool_layer(model, seqs, pools, layer=1, batch_size=3, pad_id=tokenizer.pad_token_id)
    for a, b in zip(alone, together, strict=True):
        assert np.allclose(a, b, atol=1e-5)


def test_inference_mode_restores_every_module_and_leaves_no_grad(tiny_lm: tuple[Any, Any]) -> None:
    model, tokenizer = tiny_lm
    model.train()
    frozen = model.model.layers[0]
    frozen.eval()  # a submodule deliberately in eval mode must stay so
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rng = torch.get_rng_state()
    ids = tokenizer("Compute 1 + 2 = 3.")["input_ids"]
    with inference_mode(model):
        assert not model.training and not torch.is_grad_enabled()
        pool_layer(model, [ids], [[np.arange(len(ids))]], layer=1, batch_size=1, pad_id=0)
    assert model.training and not frozen.training
    assert all(m.training for m in model.modules() if m is not frozen and not _inside(m, frozen))
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert torch.equal(rng, torch.get_rng_state())
    model.train()


def _inside(module: Any, parent: Any) -> bool:
    return any(module is m for m in parent.modules())
