"""The declarative descriptions a diagram is drawn from (tools.refdocs.diagrams.catalog builds
them; layout and the tests read them): a layered graph (nodes, edges) or a sequence diagram
(participants, messages). Frozen data, no drawing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """A box. ``rank`` is its row (0 at the top); None: one below its lowest predecessor."""

    key: str
    label: str
    rank: int | None = None


@dataclass(frozen=True)
class Edge:
    """An arrow from ``source`` to ``target`` (node keys)."""

    source: str
    target: str


@dataclass(frozen=True)
class Graph:
    """Boxes in rows, top to bottom; within a row in the order the nodes are given."""

    name: str
    alt: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


@dataclass(frozen=True)
class Participant:
    key: str
    label: str


@dataclass(frozen=True)
class Message:
    """One arrow between lifelines; ``reply`` draws it dashed (an answer to an earlier one)."""

    source: str
    target: str
    label: str
    reply: bool = False


@dataclass(frozen=True)
class Sequence:
    """Participants left to right, messages numbered top to bottom in the order given."""

    name: str
    alt: str
    participants: tuple[Participant, ...]
    messages: tuple[Message, ...]


Diagram = Graph | Sequence


def labels(diagram: Diagram) -> list[str]:
    """Every text the picture must show, in the description's order."""
    if isinstance(diagram, Graph):
        return [node.label for node in diagram.nodes]
    return [p.label for p in diagram.participants] + [m.label for m in diagram.messages]


def check(diagram: Diagram) -> None:
    """Raise ValueError naming the first edge or message whose end is not declared."""
    if isinstance(diagram, Graph):
        keys = {node.key for node in diagram.nodes}
        ends = [(e.source, e.target) for e in diagram.edges]
    else:
        keys = {p.key for p in diagram.participants}
        ends = [(m.source, m.target) for m in diagram.messages]
    for source, target in ends:
        for key in (source, target):
            if key not in keys:
                raise ValueError(f"diagram {diagram.name}: {source} -> {target}: no node {key!r}")
