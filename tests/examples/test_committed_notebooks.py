"""The committed notebooks are stripped of outputs, each has a ``parameters`` cell, they use
only the public ``sarl`` API, and the local ones share the CLI's store by default.

Outputs in git would make every run a diff and could carry paths, tokens or run ids from the
author's machine; the parameters cell is what the notebook tests override (see
:mod:`tests.examples.notebooks`).
"""

from __future__ import annotations

import ast
import re

import pytest
from nbformat import NotebookNode

import sarl
from tests.examples.notebooks import NOTEBOOKS, load, parameters_index

NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def test_the_three_notebooks_exist() -> None:
    assert NAMES == ["01-quickstart.ipynb", "02-compare.ipynb", "03-cluster.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_outputs_are_stripped(name: str) -> None:
    nb = load(name)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.get("outputs") == [], f"{name} cell {i} has outputs"
            assert cell.get("execution_count") is None, f"{name} cell {i} has an execution count"


@pytest.mark.parametrize("name", NAMES)
def test_has_a_parameters_cell(name: str) -> None:
    assert parameters_index(load(name)) >= 0


def _imports(nb: NotebookNode) -> list[tuple[str, str]]:
    """(module, name) of every import in the code cells (name "" for ``import module``)."""
    found: list[tuple[str, str]] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                found += [(alias.name, "") for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                found += [(node.module or "", alias.name) for alias in node.names]
    return found


def _sarl_attributes(nb: NotebookNode) -> set[str]:
    """The names read off ``sarl`` itself (``sarl.X``) in the code cells."""
    return {
        node.attr
        for cell in nb.cells
        if cell.cell_type == "code"
        for node in ast.walk(ast.parse(cell.source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "sarl"
    }


@pytest.mark.parametrize("name", NAMES)
def test_only_the_public_api_is_used(name: str) -> None:
    """A notebook is what users copy: it imports ``sarl`` alone (no ``sarl.spec.presets``,
    ``sarl.cluster.client``...) and reads only the names ``sarl.__all__`` offers."""
    nb = load(name)
    internal = [
        f"{module}{'.' + what if what else ''}"
        for module, what in _imports(nb)
        if module.startswith("sarl.") or (module == "sarl" and what and what not in sarl.__all__)
    ]
    assert internal == [], f"{name} imports internals: {internal}"
    assert _sarl_attributes(nb) <= set(sarl.__all__)


@pytest.mark.parametrize("name", ["01-quickstart.ipynb", "02-compare.ipynb"])
def test_the_local_notebooks_share_the_clis_store_by_default(name: str) -> None:
    """``WORKDIR`` defaults to ``None``: ``sarl.Client.local()`` then takes the workdir the CLI
    takes (``sarl.workdir.default_workdir``), not a ``.sarl`` of their own next to them."""
    source = load(name).cells[parameters_index(load(name))].source
    assert re.search(r"^WORKDIR = None\b", source, re.M), source
