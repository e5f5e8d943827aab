"""A notebook as a Markdown page of the docs site, for ``tools.notebook_pages.__main__``.

Markdown cells as they are (relative links re-pointed from the notebook's folder to the
page's), code cells as ``python`` blocks, and each cell's recorded outputs after it: text in
``text`` blocks, PNGs as files under ``docs/assets/notebooks/`` embedded as images, HTML (the
sarl results' and pandas' tables) kept as HTML with its inline images taken out as files. Pure:
the page and the images come back, the caller writes them. ``tests/docs/test_notebook_pages.py``
reads pages with :func:`python_blocks`.
"""

from __future__ import annotations

import base64
import copy
import html
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from nbformat import NotebookNode

from tools.notebook_pages import clean

MAX_LINES = 40
PAGE_DIR = "docs/tutorials/notebooks"
ASSETS_DIR = "docs/assets/notebooks"
NOTEBOOK_DIR = "examples/notebooks"
FIGURE = re.compile(
    r"<figure>\s*<img\b[^>]*?src=\"data:image/png;base64,([^\"]+)\"[^>]*>\s*"
    r"(?:<figcaption>(.*?)</figcaption>)?\s*</figure>",
    re.S,
)
LINK = re.compile(r"(\]\()([^)#\s]+)([)#\s])")
PYTHON_FENCE = re.compile(r"^(`{3,})python\n(.*?)\n\1$", re.M | re.S)


@dataclass(frozen=True)
class Context:
    """What the rendering of one notebook's outputs needs: its name, and the recording
    machine's paths with their stand-ins (most specific first)."""

    stem: str
    roots: Sequence[tuple[str, str]] = ()


@dataclass
class Page:
    """A page being built: its Markdown parts and the images it embeds (file name → PNG)."""

    parts: list[str] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)

    def image(self, ctx: Context, cell: int, png: bytes, alt: str) -> str:
        """Keep ``png`` as an asset; the Markdown that embeds it."""
        name = f"{ctx.stem}-{cell}-{len(self.images)}.png"
        self.images[name] = png
        rel = posixpath.relpath(f"{ASSETS_DIR}/{name}", PAGE_DIR)
        return f"![{alt}]({rel})"


def fence(text: str, lang: str) -> str:
    """``text`` in a fenced block longer than any backtick run in it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def fix_links(markdown: str) -> str:
    """Relative links of a notebook's Markdown re-pointed from ``examples/notebooks/`` to the
    page's folder (absolute URLs and in-page anchors unchanged)."""

    def repoint(m: re.Match[str]) -> str:
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            return m.group(0)
        moved = posixpath.relpath(posixpath.normpath(f"{NOTEBOOK_DIR}/{target}"), PAGE_DIR)
        return f"{m.group(1)}{moved}{m.group(3)}"

    return LINK.sub(repoint, markdown)


def clean_text(text: str, ctx: Context, max_lines: int = MAX_LINES) -> str:
    """A text output as the page shows it."""
    text = clean.drop_progress(clean.strip_ansi(text))
    text = clean.replace_run_ids(clean.replace_paths(text, ctx.roots))
    return clean.truncate(text, max_lines).strip("\n")


def html_output(markup: str, ctx: Context, cell: int, page: Page) -> list[str]:
    """The parts for one HTML output: the HTML without its inline images, then the images."""
    images: list[str] = []

    def take(m: re.Match[str]) -> str:
        alt = html.unescape(re.sub(r"<[^>]+>", "", m.group(2) or "")) or f"output of cell {cell}"
        images.append(page.image(ctx, cell, base64.b64decode(m.group(1)), alt))
        return ""

    markup = FIGURE.sub(take, markup)
    markup = clean.replace_run_ids(clean.replace_paths(markup, ctx.roots), clean.RUN_ID_HTML)
    # Python-Markdown keeps an HTML block raw up to its end; blank lines inside would end it.
    markup = "\n".join(line for line in markup.split("\n") if line.strip())
    parts = [f'<div class="nb-output" markdown="0">\n{markup}\n</div>']
    if images:
        parts.append(" ".join(images))
    return parts


def output_parts(out: NotebookNode, ctx: Context, cell: int, page: Page) -> list[str]:
    """The Markdown parts for one recorded output (none for progress bars)."""
    if out.output_type == "stream":
        text = clean_text(out.text, ctx)
        return [fence(text, "text")] if text else []
    data = out.get("data", {})
    if "image/png" in data:
        png = base64.b64decode(data["image/png"])
        return [page.image(ctx, cell, png, f"output of cell {cell}")]
    if "text/html" in data:
        return html_output(data["text/html"], ctx, cell, page)
    if "text/plain" in data:
        text = clean_text(data["text/plain"], ctx)
        return [fence(text, "text")] if text else []
    return []


def is_progress(out: NotebookNode) -> bool:
    """Whether ``out`` is sarl's HTML progress bar (its last state; the result follows)."""
    return 'class="sarl-progress"' in out.get("data", {}).get("text/html", "")


def merge_streams(outputs: Sequence[NotebookNode]) -> list[NotebookNode]:
    """Consecutive stream outputs of one name joined, progress bars between them dropped (a
    cell's prints read as one block)."""
    merged: list[NotebookNode] = []
    for out in (o for o in outputs if not is_progress(o)):
        last = merged[-1] if merged else None
        if (
            last is not None
            and out.output_type == last.output_type == "stream"
            and out.name == last.name
        ):
            joined = copy.deepcopy(last)
            joined.text = last.text + out.text
            merged[-1] = joined
        else:
            merged.append(out)
    return merged


def render(nb: NotebookNode, ctx: Context, note: str, *, outputs: bool = True) -> Page:
    """The page of ``nb``: its first Markdown cell, then ``note`` (how it was recorded), then
    every cell in order, with its outputs when ``outputs``."""
    page = Page()
    for i, cell in enumerate(nb.cells):
        source = cell.source.strip("\n")
        if cell.cell_type == "markdown" and i == 0 and source.startswith("# "):
            # The note right under the title, however long the introduction.
            title, _, rest = source.partition("\n")
            page.parts += [title, note] + ([fix_links(rest.strip("\n"))] if rest.strip() else [])
            continue
        if cell.cell_type == "markdown":
            page.parts.append(fix_links(source))
        elif cell.cell_type == "code" and source.strip():
            page.parts.append(fence(source, "python"))
            if outputs:
                for out in merge_streams(cell.get("outputs", [])):
                    page.parts.extend(output_parts(out, ctx, i, page))
        if i == 0:
            page.parts.append(note)  # a notebook without a title: the note after its first cell
    return page


def markdown(page: Page) -> str:
    """The page's text."""
    return "\n\n".join(page.parts) + "\n"


def python_blocks(text: str) -> list[str]:
    """The ``python`` blocks of a page, in order (the notebook's code cells)."""
    return [m.group(2) for m in PYTHON_FENCE.finditer(text)]


def code_cells(nb: NotebookNode) -> list[str]:
    """The non-empty code cells of ``nb``, as the page shows them."""
    return [c.source.strip("\n") for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def roots_of(workdir: str, repo: str) -> list[tuple[str, str]]:
    """This machine's paths and their stand-ins: the workdir, the checkout, the home folder."""
    pairs = [(workdir, ".sarl"), (repo, "."), (os.path.expanduser("~"), "~")]
    return [(p, s) for p, s in pairs if p and p != "/"]
