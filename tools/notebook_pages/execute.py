"""Execute one example notebook top to bottom as a user runs it, for ``tools.notebook_pages``.

Unlike ``tests/examples/notebooks.py`` no parameters are injected: the page shows the
notebook's own parameters. The kernel is this interpreter's ipykernel, started in
``examples/notebooks/`` (where Jupyter starts it), so the notebook uses the checkout's ``sarl``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode


def read(path: Path) -> NotebookNode:
    """The notebook at ``path`` (nbformat v4); typed, as nbformat's own reader is not."""
    nb: NotebookNode = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    return nb


def write_notebook(nb: NotebookNode, path: Path) -> None:
    """Write ``nb`` to ``path``."""
    nbformat.write(nb, path)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Recording:
    """An executed notebook and how long its execution took."""

    notebook: NotebookNode
    seconds: float


def execute(path: Path, *, env: dict[str, str], timeout_s: int = 3600) -> Recording:
    """Run the notebook at ``path`` in its own folder with ``env`` merged into the kernel's
    environment; a cell that raises raises here (nbclient's ``CellExecutionError`` names it)."""
    nb = read(path)
    client = NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.km = client.create_kernel_manager()
    # This interpreter's kernel, whatever kernelspec "python3" names on the machine.
    # A traitlet jupyter_client reads, not in its stubs (as in tests/examples/notebooks.py).
    kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    client.km.kernel_cmd = kernel_cmd  # type: ignore[attr-defined]
    started = time.monotonic()
    client.execute(env={**os.environ, **env})
    return Recording(notebook=nb, seconds=time.monotonic() - started)
