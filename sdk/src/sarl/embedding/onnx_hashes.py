"""sha256 of an ONNX cache entry's files: recorded in ``check.json`` at export, verified at load.

Called by :mod:`sarl.embedding.onnx_export`. The cache directory is predictable
(``~/.cache/sarl/onnx/<key>``), so whoever can write there could plant a graph, for instance a
387-byte one whose output is a constant, making every text's vector the same (issue 38 item 10).
The export records the hash of ``model.onnx`` and of every file of ``tokenizer/``; an entry
whose files do not hash to the record, that has a file the record does not list (a planted
``tokenizer.json`` would be preferred by ``AutoTokenizer``) or that records no hashes (an older
sarl's) is not loaded: it is exported again. Pure functions over files; the caller decides.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

#: The exported graph's name in an entry (and its key in the record's ``sha256``).
MODEL_FILE = "model.onnx"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_hashes(directory: Path, prefix: str) -> dict[str, str]:
    """``{"<prefix>/<relative path>": sha256}`` for every file under ``directory`` (OSError when
    one cannot be read)."""
    return {
        f"{prefix}/{path.relative_to(directory).as_posix()}": file_sha256(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def mismatch(recorded: Any, actual: dict[str, str]) -> str | None:
    """Why the files ``actual`` (name -> sha256) are not the ones ``recorded`` at export, or
    None when they are exactly those (same names, same hashes)."""
    if not isinstance(recorded, dict) or not recorded:
        return "check.json records no sha256 of its files (an older sarl's entry)"
    for name in sorted(set(recorded) | set(actual)):
        if name not in actual:
            return f"{name} is missing"
        if name not in recorded:
            return f"{name} is not one of the exported files"
        if recorded[name] != actual[name]:
            return f"{name} does not match the sha256 recorded at export"
    return None
