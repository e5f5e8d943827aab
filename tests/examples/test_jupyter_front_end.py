"""The Jupyter commands the Notebooks page (docs/tutorials/notebooks.md) gives work in this
environment: ``make setup`` installs the sdk's ``notebook`` extra, so ``.venv/bin/jupyter lab``
and ``.venv/bin/jupyter nbconvert`` exist, and nbconvert executes a notebook in a kernel of this
environment (which has ``sarl``), writing HTML. Not skipped when Jupyter is missing: that is the
bug this guards.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
#: The ``jupyter`` of the interpreter running the tests (``.venv/bin/jupyter`` under ``make test``).
JUPYTER = Path(sys.executable).parent / "jupyter"
#: Generous: a kernel starts in seconds, but the machine may be busy.
TIMEOUT_S = 600


def readme_subcommands() -> list[str]:
    """The ``jupyter`` subcommands the Notebooks page runs, in order."""
    section = (REPO / "docs" / "tutorials" / "notebooks.md").read_text(encoding="utf-8")
    return list(dict.fromkeys(re.findall(r"\.venv/bin/jupyter (\w+)", section)))


def test_the_readme_names_lab_and_nbconvert() -> None:
    assert readme_subcommands() == ["lab", "nbconvert"]


@pytest.mark.parametrize("subcommand", readme_subcommands())
def test_each_readme_command_is_installed(subcommand: str) -> None:
    done = subprocess.run(
        [str(JUPYTER), subcommand, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", done.stdout.strip()), done.stdout


@pytest.mark.slow  # starts a kernel
def test_nbconvert_executes_a_notebook_with_sarl_and_writes_html(tmp_path: Path) -> None:
    notebook = tmp_path / "nb" / "tiny.ipynb"
    notebook.parent.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import os, sarl\nprint('sarl', sarl.__version__)"),
        nbformat.v4.new_code_cell("print('cwd', os.path.basename(os.getcwd()))"),
    ]
    nbformat.write(nb, notebook)
    out = tmp_path / "out"
    done = subprocess.run(
        [
            str(JUPYTER),
            "nbconvert",
            "--to",
            "html",
            "--execute",
            "--output-dir",
            str(out),
            str(notebook),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    html = (out / "tiny.html").read_text(encoding="utf-8")
    import sarl

    assert f"sarl {sarl.__version__}" in html  # the kernel is this environment's Python
    assert "cwd nb" in html  # and runs in the notebook's folder, as the page says
