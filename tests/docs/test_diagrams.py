"""The site's diagrams are pictures that render offline (issue 41): no page holds a mermaid
block (MkDocs Material would fetch mermaid.js from a CDN at view time, so an offline reader saw
the diagram's source), each diagram of tools.refdocs.diagrams.catalog is an SVG on a page, and
each committed SVG shows every label of its description, so the picture and its description
cannot drift. SVG bytes are not compared with a fresh drawing (matplotlib versions differ
between machines); their texts are. The layout is checked as a reader would see it: no box over
another, no arrow through a box, every text inside its box and the canvas."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from itertools import combinations
from pathlib import Path

import pytest

from tools.refdocs.diagrams.__main__ import drawing, write_all
from tools.refdocs.diagrams.catalog import ASSETS, ROOT, diagrams
from tools.refdocs.diagrams.layout import (
    HEAD_PAD,
    LINE,
    PAD,
    WIDTH,
    Box,
    Drawing,
    graph_layout,
    text_width,
)
from tools.refdocs.diagrams.model import Diagram, Edge, Graph, Node, Sequence, check, labels

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
DIAGRAMS = diagrams()
IDS = [d.name for d in DIAGRAMS]
SVG = "{http://www.w3.org/2000/svg}"


def _texts(path: Path) -> list[str]:
    """The SVG's text elements in document order (one per line of a label)."""
    tree = ET.parse(path)  # raises on a file that is not XML
    return [" ".join("".join(t.itertext()).split()) for t in tree.iter(f"{SVG}text")]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_no_page_holds_a_mermaid_block(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "```mermaid" not in text, (
        f"{page.relative_to(ROOT)}: a mermaid block; draw it in tools/refdocs/diagrams/catalog.py"
    )


def test_every_diagram_picture_on_a_page_exists() -> None:
    shown: set[str] = set()
    for page in PAGES:
        for alt, target in re.findall(r"!\[([^\]]*)\]\(([^)\s]+\.svg)\)", page.read_text("utf-8")):
            path = (page.parent / target).resolve()
            assert path.is_file(), f"{page.relative_to(ROOT)}: {target} does not exist"
            assert alt.strip(), f"{page.relative_to(ROOT)}: {target} has no alt text"
            shown.add(path.name)
    missing = [f"{d.name}.svg" for d in DIAGRAMS if f"{d.name}.svg" not in shown]
    assert not missing, f"no page shows {missing}"


@pytest.mark.parametrize("diagram", DIAGRAMS, ids=IDS)
def test_a_page_shows_the_picture_with_its_description_as_alt(diagram: Diagram) -> None:
    wanted = f"![{diagram.alt}]("
    pages = [p for p in PAGES if f"{diagram.name}.svg)" in p.read_text("utf-8")]
    assert pages, f"no page shows {diagram.name}.svg"
    for page in pages:
        assert wanted in page.read_text("utf-8"), (
            f"{page.relative_to(ROOT)}: the alt text of {diagram.name}.svg is not the "
            f"description's ({diagram.alt!r}); copy it from tools/refdocs/diagrams/catalog.py"
        )


@pytest.mark.parametrize("diagram", DIAGRAMS, ids=IDS)
def test_the_committed_svg_shows_every_label(diagram: Diagram) -> None:
    path = ROOT / ASSETS / f"{diagram.name}.svg"
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing: run `make generate`"
    shown = " ".join(_texts(path))
    missing = [label for label in labels(diagram) if _flat(label) not in shown]
    assert not missing, f"{path.relative_to(ROOT)} lacks {missing}: run `make generate`"
    if isinstance(diagram, Sequence):  # numbered in the description's order
        at = [shown.index(f"{i}. {_flat(m.label)}") for i, m in enumerate(diagram.messages, 1)]
        assert at == sorted(at)


def test_a_fresh_drawing_has_the_committed_texts_and_is_reproducible(tmp_path: Path) -> None:
    first = write_all(tmp_path / "a")
    second = write_all(tmp_path / "b")
    for a, b in zip(first, second, strict=True):
        # Same matplotlib, same bytes: no date, a fixed hash salt (the SVG's ids).
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two runs"
        committed = ROOT / ASSETS / a.name
        assert _texts(a) == _texts(committed), f"{committed.relative_to(ROOT)}: run `make generate`"
        assert "font-family" in a.read_text("utf-8"), "text was drawn as paths (svg.fonttype)"
    assert {p.name for p in first} == {p.name for p in (ROOT / ASSETS).glob("*.svg")}


def _overlap(a: Box, b: Box) -> bool:
    return abs(a.x - b.x) < (a.w + b.w) / 2 and abs(a.y - b.y) < (a.h + b.h) / 2


def _problems(d: Drawing) -> list[str]:
    """What a reader would stumble on: boxes over boxes, arrows through boxes, text that does
    not fit its box, labels over labels or boxes, anything off the canvas."""
    found = [f"{a.key} overlaps {b.key}" for a, b in combinations(d.boxes, 2) if _overlap(a, b)]
    for box in d.boxes:
        wide = [
            line
            for line in box.lines
            if text_width(line, box.size) > box.w - 2 * min(PAD, HEAD_PAD) + 0.01
        ]
        found += [f"{box.key}: {line!r} is wider than its box" for line in wide]
        if len(box.lines) * LINE > box.h:
            found.append(f"{box.key}: its lines are taller than the box")
        if not (
            box.x - box.w / 2 >= 0
            and box.x + box.w / 2 <= d.width
            and box.y + box.h / 2 <= d.height
        ):
            found.append(f"{box.key} is off the canvas")
    labels_at: list[Box] = []
    for arrow in d.arrows:
        (x0, y0), (x1, y1) = arrow.start, arrow.end
        for t in (i / 50 for i in range(51)):
            p = (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)
            found += [f"an arrow crosses {b.key}" for b in d.boxes if b.contains(p)]
        if arrow.label:
            lx, ly = arrow.label_at
            labels_at.append(Box(arrow.label, lx, ly, text_width(arrow.label), LINE, ()))
    for label in labels_at:
        if label.x - label.w / 2 < 0 or label.x + label.w / 2 > d.width:
            found.append(f"{label.key!r} runs off the canvas")
        found += [f"{label.key!r} covers {b.key}" for b in d.boxes if _overlap(label, b)]
    found += [
        f"{a.key!r} covers {b.key!r}" for a, b in combinations(labels_at, 2) if _overlap(a, b)
    ]
    return sorted(set(found))


@pytest.mark.parametrize("diagram", DIAGRAMS, ids=IDS)
def test_the_layout_reads_cleanly(diagram: Diagram) -> None:
    d = drawing(diagram)
    assert _problems(d) == []
    assert d.width <= WIDTH, "wider than the site's content column: shown smaller than 1:1"


def test_the_layout_check_sees_an_arrow_through_a_box() -> None:
    # An edge that skips a row passes straight through the box below its start.
    graph = Graph(
        "skip",
        "a skip",
        (Node("a", "top", 0), Node("b", "middle", 1), Node("c", "bottom", 2)),
        (Edge("a", "b"), Edge("b", "c"), Edge("a", "c")),
    )
    assert "an arrow crosses b" in _problems(graph_layout(graph))


def test_an_edge_to_an_undeclared_node_is_named() -> None:
    graph = Graph("g", "g", (Node("a", "A"),), (Edge("a", "nowhere"),))
    with pytest.raises(ValueError, match="diagram g: a -> nowhere: no node 'nowhere'"):
        check(graph)


def test_a_circle_without_ranks_is_refused() -> None:
    graph = Graph("g", "g", (Node("a", "A"), Node("b", "B")), (Edge("a", "b"), Edge("b", "a")))
    with pytest.raises(ValueError, match="a circle of edges"):
        graph_layout(graph)
