"""``python -m tools.refdocs.diagrams [--out DIR]``: draw every diagram of
tools.refdocs.diagrams.catalog into DIR (default docs/assets/diagrams), as ``make generate``
does. ``make check-generated`` does not compare these bytes (matplotlib versions differ between
machines); tests/docs/test_diagrams.py checks the committed SVGs against their descriptions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.refdocs.diagrams.catalog import ASSETS, ROOT, diagrams
from tools.refdocs.diagrams.draw import save_svg
from tools.refdocs.diagrams.layout import Drawing, graph_layout, sequence_layout
from tools.refdocs.diagrams.model import Diagram, Graph, check


def drawing(diagram: Diagram) -> Drawing:
    """The laid-out picture of one description."""
    check(diagram)
    return graph_layout(diagram) if isinstance(diagram, Graph) else sequence_layout(diagram)


def write_all(out: Path, root: Path = ROOT) -> list[Path]:
    """Draw every diagram into ``out``; the paths written."""
    paths = []
    for diagram in diagrams(root):
        path = out / f"{diagram.name}.svg"
        save_svg(drawing(diagram), path)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.refdocs.diagrams", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / ASSETS, help="folder for the SVGs")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
