"""`make docs` works: the site builds with ``mkdocs build --strict`` (issue 41), so a page in
the nav that does not exist, a broken link or anchor between pages, or a mkdocstrings reference
to a name that is gone fails the default suite, not only CI's `make docs` step.

Runs the real MkDocs (the sdk's pinned ``docs`` extra, installed by ``make setup-main``) into a
temporary directory; the build takes about 7 s here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: `make setup-main` installs the sdk's docs extra")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    problems = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        problems or done.stderr.splitlines()[-20:]
    )
    for page in ("index.html", "reference/cli/index.html", "reference/python-api/index.html"):
        assert (site / page).is_file(), f"{page} was not built"
    # mkdocstrings rendered the Python API (a failed import would leave the ::: lines as text).
    api = (site / "reference" / "python-api" / "index.html").read_text(encoding="utf-8")
    assert ":::" not in api and "doc-heading" in api
    # Sphinx roles in docstrings became code (tools/refdocs/griffe_roles.py), not ":class:" text.
    assert ":class:" not in api and ":func:" not in api
