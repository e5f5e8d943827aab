"""Hostile spec documents are refused by the loader in one line: size, UTF-8, depth, aliases.

The anchor bombs rely on PyYAML's composer (``yaml/composer.py``, PyYAML 6.0.x as installed in
the venv): an alias event returns the anchored node itself, so a bomb composes to a few dozen
nodes and expands only when walked; merge keys (``<<``) expand in ``flatten_mapping``
(``yaml/constructor.py``) by copying the merged pairs, so they are bombs too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sarl.spec import SpecError, load_experiment
from sarl.spec.documents import MAX_DEPTH, MAX_NODES, MAX_SPEC_BYTES, parse_yaml
from sarl.spec.loader import load_document
from tests.sarl.spec.hostile import HEAD, deep_list, list_bomb, merge_bomb


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (list_bomb(), "aliases expand the document past 10,000 nodes"),
        (merge_bomb(), "aliases expand the document past 10,000 nodes"),
        ("a: &a [1, *a]\n", "alias *a is inside the node it names"),
        (deep_list(5000), "nest"),
        (deep_list(MAX_DEPTH), f"nested deeper than {MAX_DEPTH} levels"),
        ("a: [" + ", ".join(["1"] * (MAX_NODES + 1)) + "]\n", "more than 10,000 YAML nodes"),
        ("a: [\n", "line 2: invalid YAML"),
    ],
    ids=["bomb", "merge-bomb", "cycle", "deep-5000", "deep-limit", "nodes", "syntax"],
)
def test_hostile_text_is_one_line_spec_error(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)) as info:
        load_document(text)
    assert "\n" not in str(info.value)


def test_anchors_within_the_limits_still_work() -> None:
    data = parse_yaml(list_bomb(levels=3, width=10), "ok")  # 10**3 strings: fine
    assert len(data["a2"]) == 10 and data["a2"][0][0] == ["lol"] * 10
    merged = parse_yaml("base: &b {x: 1, y: 2}\nover: {<<: *b, y: 3}\n", "ok")
    assert merged["over"] == {"x": 1, "y": 3}
    assert parse_yaml(deep_list(MAX_DEPTH - 2), "ok")["metadata"] is not None


def test_non_utf8_file_names_the_byte_offset_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    body = HEAD.encode() + b"metadata:\n  name: caf\xe9\n"
    path.write_bytes(body)
    offset = body.index(b"\xe9")
    with pytest.raises(SpecError) as info:
        load_experiment(path)
    assert str(info.value) == (
        f"{path}: not UTF-8: byte 0xe9 at byte offset {offset} (line 4); save the file as UTF-8"
    )


def test_oversized_file_is_refused_naming_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:  # 50 MB, sparse: only the first MiB is ever read
        f.write(HEAD.encode())
        f.truncate(50_000_000)
    with pytest.raises(SpecError) as info:
        load_experiment(path)
    assert str(info.value).startswith(f"{path}: 50,000,000 bytes, over the 1,048,576-byte")


def test_file_at_the_cap_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "padded.yaml"
    text = HEAD + "metadata: {name: x}\n"
    path.write_text(text + "#" * (MAX_SPEC_BYTES - len(text) - 1) + "\n")
    data, label = load_document(path)
    assert data["metadata"] == {"name": "x"} and label == str(path)


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"metadata": {"name": "x"}, "spec": nested(5000)}, f"deeper than {MAX_DEPTH} levels"),
        ({"metadata": {"labels": [0] * (MAX_NODES + 1)}}, "more than 10,000 values"),
    ],
    ids=["deep", "wide"],
)
def test_documents_given_as_objects_have_the_same_limits(doc: Any, message: str) -> None:
    """The operator and ``sarl.Client`` pass dicts; a too-deep one was a RecursionError."""
    with pytest.raises(SpecError, match=message):
        load_experiment(doc)
