"""The example notebooks' pages (``docs/tutorials/notebooks/``, written by ``make
notebook-pages``) match the committed notebooks, without executing them: every code cell on its
page in order and verbatim (a notebook changed without re-recording fails here, naming the
cell), every image the page shows on disk, no path of the recording machine and nothing
credential-shaped (``sarl.spec.secrets.redact_text``, the project's own detector) on it.

The renderer's cleaning (``tools.notebook_pages``) is checked on small built notebooks: progress
bars dropped, inline images taken out as files, paths and run ids replaced, long text cut.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import nbformat
import pytest
from nbformat import NotebookNode

from sarl.spec.secrets import redact_text
from tools.notebook_pages import clean, render

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / render.NOTEBOOK_DIR).glob("*.ipynb"))
PAGES = REPO / render.PAGE_DIR
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)|<img\b[^>]*\bsrc=\"([^\"]+)\"")
RERECORD = "run `make notebook-pages` to re-record the page"


def page_of(notebook: Path) -> Path:
    return PAGES / f"{notebook.stem}.md"


def page_text(notebook: Path) -> str:
    page = page_of(notebook)
    if not page.exists():
        pytest.fail(
            f"{notebook.relative_to(REPO)} has no page {page.relative_to(REPO)}: {RERECORD}"
        )
    return page.read_text(encoding="utf-8")


def first_difference(cells: list[str], blocks: list[str]) -> str | None:
    """What differs between the notebook's code cells and the page's python blocks."""
    for i, source in enumerate(cells):
        if i >= len(blocks):
            return f"code cell {i + 1} ({source.splitlines()[0]!r}) is not on the page"
        if blocks[i] != source:
            return f"code cell {i + 1} ({source.splitlines()[0]!r}) differs from the page's"
    if len(blocks) > len(cells):
        return f"the page has {len(blocks) - len(cells)} python block(s) the notebook does not"
    return None


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 3  # 01-quickstart, 02-compare, 03-cluster


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_code_cell_is_on_its_page_in_order(notebook: Path) -> None:
    cells = render.code_cells(nbformat.read(notebook, as_version=4))
    difference = first_difference(cells, render.python_blocks(page_text(notebook)))
    assert difference is None, f"{notebook.relative_to(REPO)}: {difference}; {RERECORD}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_image_of_the_page_exists(notebook: Path) -> None:
    text = page_text(notebook)
    targets = [m.group(1) or m.group(2) for m in IMAGE.finditer(text)]
    assert not [t for t in targets if t.startswith("data:")], "inline image left on the page"
    missing = [t for t in targets if not (page_of(notebook).parent / t).resolve().is_file()]
    assert not missing, f"{page_of(notebook).name} shows missing images {missing}; {RERECORD}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_machine_path_on_the_page(notebook: Path) -> None:
    assert clean.machine_paths(page_text(notebook)) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_nothing_credential_shaped_on_the_page(notebook: Path) -> None:
    # What the recording added: the notebook's own prose and code are committed as they are
    # (03's prose shows `--from-literal=AWS_SECRET_ACCESS_KEY=...`, a placeholder).
    own = {
        line
        for cell in nbformat.read(notebook, as_version=4).cells
        for line in render.fix_links(cell.source).splitlines()
    }
    recorded = "\n".join(line for line in page_text(notebook).splitlines() if line not in own)
    changed = [
        line
        for line, redacted in zip(
            recorded.splitlines(), redact_text(recorded).splitlines(), strict=True
        )
        if line != redacted
    ]
    assert changed == [], f"{page_of(notebook).name}: credential-shaped output {changed}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_page_says_how_it_was_made(notebook: Path) -> None:
    head = page_text(notebook)[:3000]
    assert "make notebook-pages" in head
    if "Recorded output" in head:
        assert re.search(r"recorded at commit `[0-9a-f]{7,}` on \d{4}-\d\d-\d\d", head)
        assert re.search(r" in (\d+ min )?\d+ s ", head)  # how long the recording took
    else:
        assert "need" in head and "cluster" in head  # why there are no outputs


def test_the_pages_test_catches_a_changed_cell() -> None:
    cells = ["import sarl", "client = sarl.Client.local()"]
    assert first_difference(cells, cells) is None
    assert "code cell 2" in str(first_difference(cells, ["import sarl", "client = 1"]))
    assert "code cell 2" in str(first_difference(cells, ["import sarl"]))


# -- the renderer, on small built notebooks ------------------------------------------------------

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
CTX = render.Context("nb", [("/work/x/.sarl", ".sarl"), ("/work/x", ".")])


def notebook(*outputs: dict[str, object]) -> NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("f()")]
    nb.cells[1].outputs = [nbformat.from_dict(o) for o in outputs]
    return nb


def rendered(*outputs: dict[str, object]) -> tuple[str, render.Page]:
    page = render.render(notebook(*outputs), CTX, "NOTE")
    return render.markdown(page), page


def test_page_order_title_note_code_outputs() -> None:
    text, _ = rendered({"output_type": "stream", "name": "stdout", "text": "hi\n"})
    assert text == "# Title\n\nNOTE\n\n```python\nf()\n```\n\n```text\nhi\n```\n"


def test_progress_bars_and_ansi_codes_are_dropped() -> None:
    bar = '<div class="sarl-progress"><progress value="2" max="2"></progress></div>'
    text, _ = rendered(
        {"output_type": "display_data", "metadata": {}, "data": {"text/html": bar}},
        {"output_type": "stream", "name": "stdout", "text": "a:  50%|#####     | 1/2\rdone\n"},
        {"output_type": "stream", "name": "stdout", "text": "\x1b[32mgreen\x1b[0m\n"},
    )
    assert "progress" not in text and "50%" not in text and "\x1b" not in text
    assert "```text\ndone\ngreen\n```" in text


def test_inline_images_become_asset_files() -> None:
    figure = (
        f'<figure><img src="data:image/png;base64,{PNG}"/><figcaption>map 1</figcaption></figure>'
    )
    text, page = rendered(
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": PNG}},
        {
            "output_type": "execute_result",
            "execution_count": 1,
            "metadata": {},
            "data": {"text/html": f"<div><b>maps</b>{figure}</div>", "text/plain": "Gallery()"},
        },
    )
    assert "data:image" not in text
    assert list(page.images) == ["nb-1-0.png", "nb-1-1.png"]
    assert "![map 1](../../assets/notebooks/nb-1-1.png)" in text
    assert page.images["nb-1-1.png"].startswith(b"\x89PNG")


def test_machine_paths_and_run_ids_are_replaced() -> None:
    run_id = "c6e681b4b1064401940a17ab4fb1815d"
    text, _ = rendered(
        {
            "output_type": "stream",
            "name": "stdout",
            "text": f"sqlite:////work/x/.sarl/mlflow.db run {run_id} in /work/x/examples\n",
        },
        {
            "output_type": "execute_result",
            "execution_count": 1,
            "metadata": {},
            "data": {"text/html": f"<i>run {run_id}</i>"},
        },
    )
    assert "sqlite:///.sarl/mlflow.db run <run id> in ./examples" in text
    assert "<i>run &lt;run id&gt;</i>" in text
    assert clean.machine_paths(text) == []


def test_long_text_is_cut_with_a_count() -> None:
    text = "\n".join(f"line {i}" for i in range(render.MAX_LINES + 5))
    cut = render.clean_text(text, CTX)
    assert cut.splitlines()[-1] == "... (5 more lines cut)"
    assert len(cut.splitlines()) == render.MAX_LINES + 1


def test_relative_links_follow_the_page() -> None:
    assert render.fix_links("[spec](../local-structure.yaml)") == (
        "[spec](../../../examples/local-structure.yaml)"
    )
    assert render.fix_links("[x](https://a.b/c) [y](#here)") == "[x](https://a.b/c) [y](#here)"
