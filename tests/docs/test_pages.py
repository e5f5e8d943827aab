"""The README stays a landing page and no page links nowhere (issue 41): README.md is at most
12 KB, and every relative link and image of README.md and the hand-written docs/**/*.md names a
file that exists and, for a page, a heading that exists (the anchors MkDocs' toc extension and
GitHub make: lower case, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from tests.docs.snippets import ROOT, pages

#: The README's budget (issue 41: "README ≤ 12 KB"), in bytes.
README_MAX_BYTES = 12 * 1024
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_the_readme_is_at_most_12_kb() -> None:
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move sections into docs/"


def _unfenced(text: str) -> str:
    """The text outside fenced code blocks (a ``#`` line there is no heading)."""
    return re.sub(r"^([ \t]*)(`{3,}).*?^\1\2[ \t]*$", "", text, flags=re.M | re.S)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code (links there are not links)."""
    return re.sub(r"`[^`\n]*`", "", _unfenced(text))


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default ``slugify``)."""
    text = re.sub(r"`|\*\*?|_(?=\w)|(?<=\w)_", "", heading)  # markup the toc strips
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = _unfenced(page.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def broken_links(page: Path, docs: Path | None = None) -> list[str]:
    """The relative links of ``page`` that lead nowhere; with ``docs``, also those that leave
    that directory (a page of the site may link only within the site)."""
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif docs is not None and not file.is_relative_to(docs):
            # MkDocs serves docs/ only: `mkdocs build --strict` fails on such a link.
            broken.append(f"{target}: outside docs/ (name the path as code instead)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {path or page.name}")
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    docs = ROOT / "docs"
    assert broken_links(page, docs if page.is_relative_to(docs) else None) == []


def test_the_link_check_finds_a_missing_page_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading: yes\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-code-heading-yes) [gone](missing.md) [bad](other.md#nope)\n"
        "`[not a link](nowhere.md)`\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nope: no heading #nope in other.md",
    ]
    site = tmp_path / "site"
    site.mkdir()
    (site / "inner.md").write_text("[out](../other.md) [in](inner.md)\n", encoding="utf-8")
    assert broken_links(site / "inner.md", site) == [
        "../other.md: outside docs/ (name the path as code instead)"
    ]
