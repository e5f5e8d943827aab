"""What the tests of the local notebooks share: CI-sized run settings, a policy cache shared by
the notebooks' workdirs, and a reader for one executed cell's outputs.

Used by ``test_notebook_quickstart.py``, ``test_notebook_compare.py`` and ``test_kernel_runs.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nbformat import NotebookNode

from tests.examples.notebooks import execute

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

#: Merged into an example spec (or a Study's base): a 2-step run of the tiny policy on CPU,
#: warm-started for 20 steps, evaluated on 2 problems, maps and checkpoints at every step.
SMALL: dict[str, Any] = {
    "model": {"warm_start": {"steps": 20}},
    "data": {"train_size": 8, "eval_size": 2, "difficulty": 1},
    "algorithm": {
        "rollouts_per_prompt": 2,
        "train_batch_size": 2,
        "mini_batch_size": 2,
        "max_response_length": 32,
        "max_steps": 2,
    },
    "evaluation": {"k": 1, "every_n_steps": 2, "max_problems": 2},
    "tracking": {"log_maps_every_n_steps": 1},
    "storage": {"every_n_steps": 2},
}


def workdir_with_cache(cwd: Path, cache: Path) -> Path:
    """``cwd/.sarl`` (the notebooks' WORKDIR) with ``cache`` as its policy cache, so the
    notebooks of one test session build the tiny policy once."""
    workdir = cwd / ".sarl"
    workdir.mkdir(parents=True)
    (workdir / "cache").symlink_to(cache, target_is_directory=True)
    return workdir


def execute_small(
    tmp_path_factory: pytest.TempPathFactory, name: str, parameters: dict[str, Any]
) -> tuple[NotebookNode, Path]:
    """Run notebook ``name`` with ``parameters`` in a fresh temporary working directory whose
    workdir shares the session's policy cache; the executed notebook and that directory."""
    cwd = tmp_path_factory.mktemp(Path(name).stem)
    cache = tmp_path_factory.getbasetemp() / "notebook-policy-cache"
    cache.mkdir(exist_ok=True)
    workdir_with_cache(cwd, cache)
    start = time.monotonic()
    nb = execute(name, parameters, cwd=cwd)
    print(f"{name} executed in {time.monotonic() - start:.0f} s")  # shown with pytest -s
    return nb, cwd


def assert_every_cell_ran(nb: NotebookNode) -> None:
    """Every code cell executed, and none wrote a traceback or a warning to stderr."""
    assert all(c.execution_count is not None for c in cells(nb))
    for c in cells(nb):
        assert "Traceback" not in c.stderr and "Warning" not in c.stderr, c.source


def assert_no_stderr(nb: NotebookNode) -> None:
    """No cell wrote to stderr: a front end shows each such output as an error box, and a run
    that went well has nothing to warn about (MLflow's INFO lines, sarl's status lines)."""
    for c in cells(nb):
        assert c.stderr == "", f"{c.source.splitlines()[0]!r} wrote to stderr: {c.stderr[:500]!r}"


@dataclass
class Cell:
    """One executed code cell: its source and outputs, read the way a test asserts on them."""

    source: str
    outputs: list[NotebookNode]
    execution_count: int | None

    @property
    def stdout(self) -> str:
        return "".join(o["text"] for o in self.outputs if o.get("name") == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(o["text"] for o in self.outputs if o.get("name") == "stderr")

    def data(self, mime: str) -> list[str]:
        """Every displayed value of type ``mime`` (e.g. ``text/html``), in order."""
        return [o["data"][mime] for o in self.outputs if mime in o.get("data", {})]

    @property
    def html(self) -> str:
        return "\n".join(self.data("text/html"))


def cells(nb: NotebookNode) -> list[Cell]:
    """The executed code cells (the injected parameters cell included)."""
    return [
        Cell(c.source, list(c.get("outputs", [])), c.get("execution_count"))
        for c in nb.cells
        if c.cell_type == "code"
    ]


def cell(nb: NotebookNode, snippet: str) -> Cell:
    """The one code cell whose source contains ``snippet``."""
    found = [c for c in cells(nb) if snippet in c.source]
    if len(found) != 1:
        raise LookupError(f"{len(found)} cells contain {snippet!r}")
    return found[0]
