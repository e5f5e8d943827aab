"""Execute the example notebooks (``examples/notebooks/*.ipynb``) in a real Jupyter kernel.

Used by the notebook tests in this package. :func:`execute` runs a notebook top to bottom with
nbclient in an IPython kernel started from this interpreter (so the kernel sees the same
installed ``sarl``), after injecting a cell that overrides the notebook's parameters, as
papermill does: the cell tagged ``parameters`` holds the defaults a user sees, and the injected
cell right after it sets small settings for CI. A cell that raises fails the run with
:class:`nbclient.exceptions.CellExecutionError` naming the cell and the error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode

NOTEBOOKS = Path(__file__).resolve().parents[2] / "examples" / "notebooks"
PARAMETERS_TAG = "parameters"


def load(name: str) -> NotebookNode:
    """The committed notebook ``examples/notebooks/<name>``."""
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def parameters_index(nb: NotebookNode) -> int:
    """Index of the cell tagged ``parameters``; ValueError when there is none."""
    for i, cell in enumerate(nb.cells):
        if PARAMETERS_TAG in cell.get("metadata", {}).get("tags", []):
            return i
    raise ValueError("the notebook has no cell tagged 'parameters'")


def inject_parameters(nb: NotebookNode, parameters: Mapping[str, Any]) -> NotebookNode:
    """A copy of ``nb`` with a cell assigning ``parameters`` right after its parameters cell."""
    nb = nbformat.from_dict(nb)  # deep copy
    lines = ["# Parameters injected by the tests"]
    lines += [f"{name} = {value!r}" for name, value in parameters.items()]
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(parameters_index(nb) + 1, cell)
    return nb


def execute(
    name: str,
    parameters: Mapping[str, Any],
    *,
    cwd: Path,
    timeout_s: int = 600,
    env: Mapping[str, str] | None = None,
) -> NotebookNode:
    """Run ``examples/notebooks/<name>`` with ``parameters`` in ``cwd``; the executed notebook.

    The kernel is this interpreter's ipykernel (not whatever ``python3`` kernelspec the machine
    has), so a notebook test exercises the checkout under test. ``env`` is merged into the
    kernel's environment.
    """
    import os

    nb = inject_parameters(load(name), parameters)
    client = NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
    )
    kernel_env = {**os.environ, **(env or {})}
    # The kernel is started with this interpreter, whatever kernelspec "python3" names here.
    client.km = client.create_kernel_manager()
    client.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    client.execute(env=kernel_env)
    return nb


def outputs_text(nb: NotebookNode, tag: str | None = None) -> str:
    """Every text output of the executed notebook (stdout, stderr, text/plain, text/html), or
    only that of the cells tagged ``tag``."""
    parts: list[str] = []
    for cell in nb.cells:
        if tag is not None and tag not in cell.get("metadata", {}).get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append(out["text"])
            data = out.get("data", {})
            for mime in ("text/plain", "text/html"):
                if mime in data:
                    parts.append(data[mime])
    return "\n".join(parts)


def has_image(nb: NotebookNode) -> bool:
    """Whether any cell displayed a PNG (a figure rendered inline)."""
    return any(
        "image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", [])
    )
