"""The committed notebooks are stripped of outputs and each has a ``parameters`` cell.

Outputs in git would make every run a diff and could carry paths, tokens or run ids from the
author's machine; the parameters cell is what the notebook tests override (see
:mod:`tests.examples.notebooks`).
"""

from __future__ import annotations

import pytest

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
