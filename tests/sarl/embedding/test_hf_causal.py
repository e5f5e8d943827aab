"""``embedder.kind: hf_causal``: a local Hugging Face causal LM embeds step strings (no server).

Run on the warm-started tiny policy's directory, as any local model directory would be.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sarl.embedding.base import Embedder, EmbeddingError
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.embedding.hf_causal import HFCausalEmbedder

torch = pytest.importorskip("torch")

STEPS = [
    "Goal: 6 + ((8 - 1) * 5).",
    "First, 8 - 1 = 7.",
    "Compute 7 * 5 = 35.",
    "So the answer is 41.",
    "First, 8 - 1 = 7.",  # a duplicate
    "x",
]


@pytest.fixture(scope="module")
def embedder(tiny_policy_dir: Path) -> HFCausalEmbedder:
    built = make_embedder(EmbedderConfig(kind="hf_causal", model=str(tiny_policy_dir)))
    assert isinstance(built, HFCausalEmbedder) and isinstance(built, Embedder)
    return built


def test_unit_norm_float32_rows_in_input_order(embedder: HFCausalEmbedder) -> None:
    vectors = embedder.embed(STEPS)
    assert vectors.shape == (len(STEPS), 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[1], vectors[4])
    assert not np.allclose(vectors[0], vectors[1])
    assert embedder.embed([]).shape == (0, 0)


def _manual(tiny_policy_dir: Path, text: str, layer: int) -> np.ndarray:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir).eval()
    ids = tokenizer(text)["input_ids"]  # the tiny tokenizer adds no BOS
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    vec = out.hidden_states[layer][0].mean(dim=0).numpy()  # (dim,)
    return vec / np.linalg.norm(vec)


def test_default_layer_is_the_middle_one(embedder: HFCausalEmbedder, tiny_policy_dir: Path) -> None:
    assert embedder.layer_index == 1  # the tiny policy has 2 layers: 2 // 2
    vector = embedder.embed([STEPS[2]])[0]
    assert np.allclose(vector, _manual(tiny_policy_dir, STEPS[2], 1), atol=1e-5)


def test_layer_setting_picks_the_layer(tiny_policy_dir: Path) -> None:
    last = make_embedder(EmbedderConfig(kind="hf_causal", model=str(tiny_policy_dir), layer=-1))
    vector = last.embed([STEPS[2]])[0]
    assert np.allclose(vector, _manual(tiny_policy_dir, STEPS[2], 2), atol=1e-5)


def test_same_text_same_vector_whatever_the_batch(
    embedder: HFCausalEmbedder, tiny_policy_dir: Path
) -> None:
    """Deterministic, and padding in a batch of mixed lengths changes nothing (float tolerance)."""
    reference = embedder.embed(STEPS)
    assert np.array_equal(reference, embedder.embed(STEPS))
    for size in (1, 2, 16):
        other = HFCausalEmbedder(str(tiny_policy_dir), batch_size=size)
        assert np.allclose(other.embed(STEPS), reference, atol=1e-5), size
    one_by_one = np.stack([embedder.embed([s])[0] for s in STEPS])
    assert np.allclose(one_by_one, reference, atol=1e-5)


def test_max_tokens_pools_the_first_tokens(tiny_policy_dir: Path, tiny_lm: tuple[Any, Any]) -> None:
    _, tokenizer = tiny_lm
    text = STEPS[0]
    ids = tokenizer(text)["input_ids"]
    head = tokenizer.decode(ids[:4])
    short = HFCausalEmbedder(str(tiny_policy_dir), max_tokens=4)
    assert np.allclose(short.embed([text])[0], short.embed([head])[0], atol=1e-6)


class _BosTokenizer:
    """A tokenizer that puts BOS (id 1) in front when asked for special tokens, as Llama's and
    Mistral's do: one token per character (its code point)."""

    def __call__(self, texts: list[str], add_special_tokens: bool) -> dict[str, list[list[int]]]:
        bos = [1] if add_special_tokens else []
        return {"input_ids": [bos + [ord(c) for c in text] for text in texts]}


@pytest.mark.parametrize("max_tokens", [3, 6, 64])
def test_a_bos_is_never_pooled_even_past_max_tokens(max_tokens: int) -> None:
    """The pooled positions are the string's own tokens, cut at ``max_tokens`` with the BOS
    counted (it is in the sequence the model reads): never position 0, the BOS."""
    embedder = HFCausalEmbedder("unused", max_tokens=max_tokens)  # the model loads lazily
    (ids,), ((positions,),) = embedder._encode(_BosTokenizer(), ["abcde"])
    assert ids == [1, *map(ord, "abcde")][:max_tokens]
    assert positions.tolist() == list(range(1, min(6, max_tokens)))


def test_errors_name_the_field(tiny_policy_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"embedder\.model: required"):
        make_embedder(EmbedderConfig(kind="hf_causal"))
    with pytest.raises(EmbeddingError, match=r"embedder\.model: .* not a model directory"):
        HFCausalEmbedder(str(tmp_path / "missing"))
    with pytest.raises(EmbeddingError, match=r"embedder\.model: cannot load"):
        HFCausalEmbedder(str(tmp_path)).embed(["x"])  # a directory without a model
    with pytest.raises(EmbeddingError, match=r"embedder\.layer"):
        HFCausalEmbedder(str(tiny_policy_dir), layer=7).embed(["x"])


def test_every_byte_token_of_a_multibyte_character_is_pooled(tiny_lm: tuple[Any, Any]) -> None:
    """The string is tokenised alone and all its tokens are pooled, so each byte token of a
    character the byte-level BPE splits ("∑": three, the emoji: four) is, as under ``kind:
    policy`` (``test_spans.py``); decoding the pooled ids gives back the whole string."""
    _, tokenizer = tiny_lm
    text = "a \u2211 \U0001f600 \u00e9"
    for char in "\u2211\U0001f600":
        assert len(tokenizer(char, add_special_tokens=False)["input_ids"]) == len(char.encode())
    embedder = HFCausalEmbedder("unused")  # the model loads lazily; _encode needs none
    (ids,), ((positions,),) = embedder._encode(tokenizer, [text])
    assert tokenizer.decode([ids[p] for p in positions]) == text
