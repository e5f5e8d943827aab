"""``sarl.display``: tables and galleries render the same content as HTML (Jupyter) and as text
(rich), escape what they show, and figures show inline without ``%matplotlib inline``."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from sarl import display

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def _table() -> display.Table:
    return display.Table(
        "final <metrics>",
        ("metric", "run & co"),
        (("reward/mean", "0.5"), ("<script>", "—")),
        numeric=frozenset({1}),
        caption="a note",
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "—"), (float("nan"), "—"), (0.123456, "0.1235"), (3, "3"), (1e-7, "1e-07")],
)
def test_number(value: float | None, shown: str) -> None:
    assert display.number(value) == shown


def test_table_html_escapes_and_right_aligns_numbers() -> None:
    html = _table().to_html()
    assert "<caption>final &lt;metrics&gt;</caption>" in html
    assert "<th>run &amp; co</th>" in html
    assert "<td>&lt;script&gt;</td>" in html and "<script>" not in html
    assert '<td class="num">0.5</td>' in html
    assert "a note" in html


def test_table_text_has_the_same_cells() -> None:
    text = display.to_text(_table().to_rich())
    for cell in ("final <metrics>", "run & co", "reward/mean", "0.5", "<script>", "a note"):
        assert cell in text


def test_section_html_and_text() -> None:
    section = display.Section("Run x: 2 steps", (_table(),), ("MLflow run abc",))
    html = section.to_html()
    assert html.startswith("<style>") and '<div class="sarl-result"><b>Run x: 2 steps</b>' in html
    assert "MLflow run abc" in html
    text = display.to_text(section.to_rich())
    assert text.splitlines()[0] == "Run x: 2 steps"
    assert "reward/mean" in text


def test_gallery_embeds_pngs_and_lists_them_in_text(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(PNG)
    gallery = display.Gallery.from_files("maps <1>", [("sample-0", tmp_path / "a.png")])
    (tmp_path / "a.png").unlink()  # the gallery holds the bytes, not the path
    html = gallery._repr_html_()
    assert f"data:image/png;base64,{base64.b64encode(PNG).decode()}" in html
    assert "maps &lt;1&gt;" in html and "<figcaption>sample-0</figcaption>" in html
    assert [i.caption for i in gallery] == ["sample-0"] and len(gallery) == 1
    assert "sample-0 (PNG, 24 bytes)" in str(gallery)


def _png_of_width(width: int) -> bytes:
    """The first bytes of a PNG: signature, then the IHDR chunk with ``width`` x 10."""
    return b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + width.to_bytes(4, "big") + b"\x00" * 9


def test_gallery_shows_each_picture_at_its_own_width_within_the_output() -> None:
    gallery = display.Gallery("maps", (display.Image("a", _png_of_width(770)),))
    html = gallery._repr_html_()
    # One PNG pixel per CSS pixel, as drawn to be read; shrunk only when the output is narrower.
    assert gallery.images[0].width_px == 770
    assert 'width="770" style="max-width:100%;height:auto"' in html
    assert html.startswith("<style>")  # the figure layout comes with the gallery
    narrow = display.Gallery("maps", gallery.images, width_px=400)._repr_html_()
    assert 'width="400"' in narrow


def test_a_picture_that_is_not_a_png_gets_no_width() -> None:
    html = display.Gallery("maps", (display.Image("a", PNG),))._repr_html_()
    assert display.Image("a", PNG).width_px is None
    assert "width=" not in html.replace("max-width", "")


def test_empty_gallery_says_why() -> None:
    gallery = display.Gallery("maps", note="the run logged no reasoning maps")
    assert "the run logged no reasoning maps" in gallery._repr_html_()
    assert "<img" not in gallery._repr_html_()
    assert "the run logged no reasoning maps" in str(gallery)


def test_figure_renders_itself_as_png() -> None:
    from matplotlib.figure import Figure

    fig = display.figure(figsize=(2, 1))
    fig.subplots().plot([0, 1], [1, 0])
    assert isinstance(fig, Figure)
    assert fig._repr_png_().startswith(b"\x89PNG")  # what IPython shows for a cell's result


def test_a_long_row_label_is_never_cut_mid_word() -> None:
    """Issue 40 item 7: at 80 columns the Study report's arm column folded a long arm name
    ("structure-h / dbscan-work / ers-one"). The label stays on one line: whole when it fits
    ``LABEL_WIDTH`` or the terminal has room, else ending in "…"."""
    from sarl.display import LABEL_WIDTH

    arms = ("ground-truth-grpo-arm", "structure-hdbscan-workers-one")
    cells = ("0.512 [0.48, 0.54]", "0.612 [0.58, 0.64]", "+0.100 [0.05, 0.15]", "beats trivial")
    table = display.Table(
        "Arms",
        ("arm", "start", "end", "change", "validity"),
        tuple((arm, *cells) for arm in arms),
        frozenset({1, 2, 3}),
    )
    text = display.to_text(table.to_rich(), width=80)
    first = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    shown = [c for c in first if c]
    assert len(shown) == len(arms), text  # one line each: no continuation of a folded name
    for arm, cell in zip(arms, shown, strict=True):
        assert cell == arm or (cell.endswith("…") and arm.startswith(cell[:-1])), text
        assert len(cell) >= min(len(arm), LABEL_WIDTH), text
