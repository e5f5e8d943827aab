"""`make docs` works: the site builds with ``mkdocs build --strict`` (issue 41), so a page in
the nav that does not exist, a broken link or anchor between pages, or a mkdocstrings reference
to a name that is gone fails the default suite, not only CI's `make docs` step.

Runs the real MkDocs (the sdk's pinned ``docs`` extra, installed by ``make setup-main``) into a
temporary directory; the build takes about 7 s here."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What a browser loads from a page by itself: scripts, stylesheets, fonts, images, frames
#: (links a reader clicks are not loaded).
_LOADED = re.compile(
    r"<(?:script|img|iframe)\b[^>]*\bsrc=[\"'](?P<src>[^\"']+)"
    r"|<link\b[^>]*\bhref=[\"'](?P<href>[^\"']+)[^>]*>"
    r"|url\((?P<url>[^)]+)\)"
)


def external_loads(html: str) -> list[str]:
    """The addresses ``html`` makes a browser load from another host (``http(s)://`` or
    ``//host``), except ``<link>`` elements that are not fetched (``rel=canonical`` and the
    like: only stylesheets, preloads, preconnects and icons are)."""
    found = []
    for m in _LOADED.finditer(html):
        address = (m["src"] or m["href"] or m["url"] or "").strip("'\" ")
        if m["href"] and not re.search(
            r"rel=[\"'][^\"']*(stylesheet|preload|preconnect|icon)", m[0]
        ):
            continue
        if address.startswith(("http://", "https://", "//")):
            found.append(address)
    return found


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
    # Every page reads offline: nothing loaded from another host (Google Fonts, a CDN's script).
    loads = {
        str(page.relative_to(site)): external_loads(page.read_text(encoding="utf-8"))
        for page in site.rglob("*.html")
    }
    assert not {page: found for page, found in loads.items() if found}


def test_external_loads_finds_what_a_browser_would_fetch() -> None:
    """The check above on the head Material writes with its default font, and on a CDN script
    (mermaid.js, as the site loaded before its diagrams were SVG): both found; links not."""
    head = (
        '<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>'
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
        '<script src="https://unpkg.com/mermaid@11/dist/mermaid.min.js"></script>'
        '<link rel="canonical" href="https://example.org/sarl/">'
        '<a href="https://github.com/kubeflow/trainer">Trainer</a>'
        '<link rel="stylesheet" href="../assets/stylesheets/main.css">'
    )
    assert external_loads(head) == [
        "https://fonts.gstatic.com",
        "https://fonts.googleapis.com/css?family=Roboto",
        "https://unpkg.com/mermaid@11/dist/mermaid.min.js",
    ]
