"""Where everything in a diagram goes: pure geometry in points (1/72 inch, y down), read by
tools.refdocs.diagrams.draw and by tests/docs/test_diagrams.py (no box overlaps another, no
arrow crosses a box it does not join, every text fits its box and the canvas).

Text is measured with matplotlib's own metrics of DejaVu Sans (the font the SVG names first);
a browser's sans-serif fallback is usually narrower, so the measure errs on the roomy side.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

from tools.refdocs.diagrams.model import Edge, Graph, Sequence

FONT = "DejaVu Sans"
#: 516 pt = 688 CSS px: the content column of a built page in a 1400 px wide window (headless
#: Chromium, measured), so the SVG shows at 1:1 and 9 pt text at 12 px.
WIDTH = 516.0
SIZE = 9.0  # pt, labels and boxes
HEAD_SIZE = 8.0  # pt, a sequence diagram's participants: nine share the width
LINE = SIZE * 1.3  # baseline to baseline
PAD = 5.0  # text to box edge
HEAD_PAD = 3.0
MARGIN = 6.0  # box to canvas edge
Point = tuple[float, float]


@dataclass(frozen=True)
class Box:
    """A rectangle centred on (x, y) with its text lines."""

    key: str
    x: float
    y: float
    w: float
    h: float
    lines: tuple[str, ...]
    size: float = SIZE

    def contains(self, p: Point, inset: float = 0.0) -> bool:
        return abs(p[0] - self.x) < self.w / 2 - inset and abs(p[1] - self.y) < self.h / 2 - inset


@dataclass(frozen=True)
class Arrow:
    """A straight arrow with its head at ``end``; ``label`` sits centred at ``label_at``."""

    start: Point
    end: Point
    dashed: bool = False
    label: str = ""
    label_at: Point = (0.0, 0.0)


@dataclass(frozen=True)
class Drawing:
    width: float
    height: float
    boxes: tuple[Box, ...]
    arrows: tuple[Arrow, ...]
    lifelines: tuple[tuple[Point, Point], ...] = ()


@cache
def text_width(text: str, size: float = SIZE) -> float:
    """Width of one line of ``text`` in points."""
    props = FontProperties(family=FONT, size=size)
    width, _, _ = TextToPath().get_text_width_height_descent(text, props, ismath=False)
    return float(width)


def wrap(text: str, width: float, size: float = SIZE) -> tuple[str, ...]:
    """Words of ``text`` greedily into lines of at most ``width`` (a longer word stands alone)."""
    lines: list[str] = []
    for word in text.split():
        if lines and text_width(f"{lines[-1]} {word}", size) <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return tuple(lines)


def _ranks(graph: Graph) -> dict[str, int]:
    """A node's own rank, else one below its lowest predecessor (a longest path from a root)."""
    rank = {n.key: n.rank if n.rank is not None else 0 for n in graph.nodes}
    fixed = {n.key for n in graph.nodes if n.rank is not None}
    for _ in range(len(graph.nodes) + 1):
        moved = False
        for e in graph.edges:
            if e.target not in fixed and rank[e.target] <= rank[e.source]:
                rank[e.target], moved = rank[e.source] + 1, True
        if not moved:
            return rank
    raise ValueError(f"diagram {graph.name}: a circle of edges; give its nodes a rank")


def _spread(desired: list[float], slot: float, width: float) -> list[float]:
    """Centres as near ``desired`` as the row allows: in the given order, ``slot`` apart, inside."""
    xs: list[float] = []
    for want in desired:
        xs.append(max(want, slot / 2, xs[-1] + slot if xs else 0.0))
    overflow = xs[-1] - (width - slot / 2)
    return [x - overflow for x in xs] if overflow > 0 else xs


def _ports(a: Box, b: Box, shift: Point = (0.0, 0.0), gap: float = 2.0) -> tuple[Point, Point]:
    """Ends of the arrow from ``a`` to ``b``: side to side within a row, else from a bottom to
    b top (or top to bottom), so that between two rows an arrow crosses no box. ``shift`` moves
    each end along its edge, so that arrows sharing a side do not share a point."""
    if a.y == b.y:
        sign = 1.0 if b.x > a.x else -1.0
        return (a.x + sign * (a.w / 2 + gap), a.y), (b.x - sign * (b.w / 2 + gap), b.y)
    sign = 1.0 if b.y > a.y else -1.0
    start = (a.x + shift[0], a.y + sign * (a.h / 2 + gap))
    return start, (b.x + shift[1], b.y - sign * (b.h / 2 + gap))


def _shifts(boxes: dict[str, Box], edges: tuple[Edge, ...]) -> list[Point]:
    """Per edge, how far its two ends sit from their boxes' centres: the ends on one side of a
    box spread out in the order of the boxes at their other ends (so they do not cross)."""
    sides: dict[tuple[str, bool], list[tuple[float, int, int]]] = {}
    for i, e in enumerate(edges):
        a, b = boxes[e.source], boxes[e.target]
        if a.y != b.y:
            sides.setdefault((e.source, b.y > a.y), []).append((b.x, i, 0))
            sides.setdefault((e.target, a.y > b.y), []).append((a.x, i, 1))
    shifts = [[0.0, 0.0] for _ in edges]
    for (key, _), ends in sides.items():
        step = min(18.0, 0.6 * boxes[key].w / len(ends))
        for j, (_, i, end) in enumerate(sorted(ends)):
            shifts[i][end] = (j - (len(ends) - 1) / 2) * step
    return [(s[0], s[1]) for s in shifts]


def graph_layout(graph: Graph, width: float = WIDTH, gap_x: float = 20.0) -> Drawing:
    """Rows top to bottom across ``width`` points; a node sits under the mean of its
    predecessors in earlier rows."""
    ranks = _ranks(graph)
    cols = max(Counter(ranks.values()).values())
    slot = (width - 2 * MARGIN) / cols
    box_w = slot - gap_x
    lines = {n.key: wrap(n.label, box_w - 2 * PAD) for n in graph.nodes}
    box_h = max(len(v) for v in lines.values()) * LINE + 2 * PAD
    rows: dict[int, list[str]] = {}
    for node in graph.nodes:
        rows.setdefault(ranks[node.key], []).append(node.key)
    inner = cols * slot
    preds = {n.key: [e.source for e in graph.edges if e.target == n.key] for n in graph.nodes}
    x: dict[str, float] = {}
    for _, row in sorted(rows.items()):
        first = inner / 2 - (len(row) - 1) * slot / 2  # a row without predecessors is centred
        desired = []
        for i, key in enumerate(row):
            above = [x[p] for p in preds[key] if p in x]
            desired.append(sum(above) / len(above) if above else first + i * slot)
        x.update(zip(row, _spread(desired, slot, inner), strict=True))
    gap_y = 3.2 * LINE
    boxes = {
        key: Box(
            key, x[key] + MARGIN, MARGIN + r * (box_h + gap_y) + box_h / 2, box_w, box_h, lines[key]
        )
        for key, r in ranks.items()
    }
    shifts = _shifts(boxes, graph.edges)
    arrows = tuple(
        Arrow(*_ports(boxes[e.source], boxes[e.target], shift))
        for e, shift in zip(graph.edges, shifts, strict=True)
    )
    height = 2 * MARGIN + (max(ranks.values()) + 1) * (box_h + gap_y) - gap_y
    return Drawing(width, height, tuple(boxes[n.key] for n in graph.nodes), arrows)


def sequence_layout(seq: Sequence, width: float = WIDTH) -> Drawing:
    """A header box per participant, one row per message, numbered in the order given."""
    col = (width - 2 * MARGIN) / len(seq.participants)
    lines = {p.key: wrap(p.label, col - 2 - 2 * HEAD_PAD, HEAD_SIZE) for p in seq.participants}
    head_h = max(len(v) for v in lines.values()) * LINE + 2 * HEAD_PAD
    x = {p.key: MARGIN + (i + 0.5) * col for i, p in enumerate(seq.participants)}
    boxes = tuple(
        Box(p.key, x[p.key], MARGIN + head_h / 2, col - 2, head_h, lines[p.key], HEAD_SIZE)
        for p in seq.participants
    )
    row = 2.2 * LINE
    top = MARGIN + head_h + 0.6 * row
    arrows = []
    for i, m in enumerate(seq.messages):
        y = top + (i + 1) * row
        label = f"{i + 1}. {m.label}"
        half = text_width(label) / 2 + 2
        mid = (x[m.source] + x[m.target]) / 2
        mid = min(max(mid, MARGIN + half), width - MARGIN - half)  # kept on the canvas
        arrows.append(
            Arrow((x[m.source], y), (x[m.target], y), m.reply, label, (mid, y - LINE * 0.6))
        )
    bottom = top + (len(seq.messages) + 0.6) * row
    lifelines = tuple(((x[p.key], MARGIN + head_h), (x[p.key], bottom)) for p in seq.participants)
    return Drawing(width, bottom + MARGIN, boxes, tuple(arrows), lifelines)
