"""reference/imports.md: who imports whom, read from the source with ``ast``.

Two levels: the four products (``sarl`` in sdk/, ``sarl_services``, ``sarl_operator``,
``sarl_jobs``), whose imports must all point into the sdk (tests/docs/test_architecture.py), and
the sdk's subpackages, each with the sdk subpackages and heavy third-party stacks it imports
(anywhere in its modules: at the top, inside a function or under ``TYPE_CHECKING``). Module-level
circles and file sizes are ``../shared/tools/house-check``'s.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tools.refdocs.markdown import code, page, table

#: product package -> its source directory, relative to the repository root
PRODUCTS = {
    "sarl": "sdk/src/sarl",
    "sarl_services": "services/src/sarl_services",
    "sarl_operator": "operators/src/sarl_operator",
    "sarl_jobs": "jobs/src/sarl_jobs",
}
#: third-party stacks worth knowing about when reading the graph (heavy or cluster-bound)
HEAVY = ("torch", "transformers", "trl", "verl", "mlflow", "kubernetes", "kopf", "kserve", "ray")


def imported(path: Path) -> Iterator[str]:
    """Absolute module names ``path`` imports (relative imports stay inside their package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def product_edges(root: Path) -> dict[str, set[str]]:
    """Product package -> the other product packages it imports."""
    edges: dict[str, set[str]] = {name: set() for name in PRODUCTS}
    for name, rel in PRODUCTS.items():
        for path in sorted((root / rel).rglob("*.py")):
            for module in imported(path):
                top = module.split(".")[0]
                if top in PRODUCTS and top != name:
                    edges[name].add(top)
    return edges


def _subpackage(path: Path, base: Path) -> str:
    first = path.relative_to(base).parts[0]
    return first.removesuffix(".py")


def sdk_edges(root: Path) -> dict[str, tuple[set[str], set[str]]]:
    """sdk subpackage (or top-level module) -> (sdk subpackages, heavy stacks) it imports."""
    base = root / PRODUCTS["sarl"]
    edges: dict[str, tuple[set[str], set[str]]] = {}
    for path in sorted(base.rglob("*.py")):
        sub = _subpackage(path, base)
        inner, heavy = edges.setdefault(sub, (set(), set()))
        for module in imported(path):
            parts = module.split(".")
            if parts[0] == "sarl" and len(parts) > 1 and parts[1] != sub:
                inner.add(parts[1])
            elif parts[0] in HEAVY:
                heavy.add(parts[0])
    return edges


#: the picture of :func:`product_edges`, drawn by tools.refdocs.diagrams (``make generate``)
PRODUCTS_SVG = "imports-products.svg"


def products_alt(edges: dict[str, set[str]]) -> str:
    """The picture's alt text: every arrow in words (also a screen reader's whole picture)."""
    sources = sorted(a for a in edges if edges[a])
    said = "; ".join(f"{a} imports {', '.join(sorted(edges[a]))}" for a in sources)
    alone = sorted(a for a in edges if not edges[a])
    return f"Who imports whom: {said}. {', '.join(alone)} imports none of them."


def _picture(edges: dict[str, set[str]]) -> str:
    # A picture, not a mermaid block: the site must show it offline (no mermaid.js from a CDN).
    return f"![{products_alt(edges)}](../assets/diagrams/{PRODUCTS_SVG})"


def imports_page(root: Path) -> tuple[str, list[str]]:
    """The page; nothing in it can lack a description."""
    products = product_edges(root)
    rows = [
        (code(f"sarl.{sub}"), ", ".join(sorted(inner)), ", ".join(sorted(heavy)))
        for sub, (inner, heavy) in sorted(sdk_edges(root).items())
        if sub != "__init__"
    ]
    sections = [
        "## Products",
        "An arrow is an import. Every product imports the sdk (`sarl`); the sdk imports none "
        "of them (`sarl serve` reaches the services through the `sarl.cli` entry point, by "
        "name only).",
        _picture(products),
        "## The sdk's subpackages",
        "What each subpackage of `sarl` imports from the others and from the heavy stacks, "
        "anywhere in its modules (most heavy imports sit inside the functions that need them, "
        "so `import sarl` stays light).",
        table(("Subpackage", "Imports from sarl", "Heavy stacks"), rows),
    ]
    intro = "Read from the source (`ast`) by `make generate`; the architecture page explains it."
    return page("Who imports whom", intro, sections), []
