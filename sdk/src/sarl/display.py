"""How sarl's result objects look in Jupyter (HTML) and in a terminal (rich): one home.

Called by the result types users get back: :class:`~sarl.runner.local.RunResult`,
:class:`~sarl.tracking.compare.Comparison` and :class:`~sarl.study.runner.StudyResult` build
:class:`Table` s and :class:`Gallery` s, and their ``_repr_html_`` (what Jupyter shows for the
last expression of a cell), ``__rich__`` (``rich.print``, ``sarl compare``) and ``__str__``
(``print``) render them through the functions here, so a table reads the same everywhere. Values
are formatted once (:func:`number`, :func:`text`) and every string that reaches HTML is escaped.
Their pictures are made by :func:`figure`: a bare matplotlib ``Figure`` (no pyplot state) that
Jupyter shows inline without ``%matplotlib inline``. rich and matplotlib are imported inside the
functions; nothing here imports pandas.
"""

from __future__ import annotations

import base64
import functools
import html
import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import RenderableType
    from rich.table import Table as RichTable

#: What an absent value looks like in a table.
MISSING = "—"
_STYLE = (
    "<style>.sarl-result table{border-collapse:collapse;margin:0.3em 0 0.8em 0}"
    ".sarl-result th,.sarl-result td{padding:0.15em 0.6em;border-bottom:1px solid #ddd;"
    "text-align:left}.sarl-result td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".sarl-result caption{caption-side:top;text-align:left;font-weight:bold;padding:0.2em 0}"
    ".sarl-result .note{color:#666;font-size:90%}"
    ".sarl-result figure{display:inline-block;vertical-align:top;margin:0 0.5em 0.5em 0;"
    "max-width:100%}.sarl-result figure img{max-width:100%;height:auto}"
    ".sarl-result figcaption{text-align:center;color:#444;font-size:90%}</style>"
)


def number(value: float | int | None, spec: str = ".4g") -> str:
    """``value`` formatted with ``spec``; :data:`MISSING` for ``None`` and NaN."""
    if value is None or value != value:  # NaN != NaN
        return MISSING
    return format(value, spec)


def text(value: object) -> str:
    """``str(value)``, :data:`MISSING` for ``None``."""
    return MISSING if value is None else str(value)


@dataclass(frozen=True)
class Table:
    """A titled table of strings (already formatted); ``numeric`` marks right-aligned columns."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...] = ()
    numeric: frozenset[int] = frozenset()
    caption: str = ""  # a note under the table, e.g. why it is empty

    def to_html(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>"
            + "".join(
                f'<td class="num">{html.escape(v)}</td>'
                if i in self.numeric
                else f"<td>{html.escape(v)}</td>"
                for i, v in enumerate(row)
            )
            + "</tr>"
            for row in self.rows
        )
        note = f'<div class="note">{html.escape(self.caption)}</div>' if self.caption else ""
        return (
            f"<table><caption>{html.escape(self.title)}</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"
        )

    def to_rich(self) -> RichTable:
        from rich.table import Table as RichTable

        table = RichTable(title=self.title, caption=self.caption or None)
        # A row's label (an arm, a run, a reward) stays whole up to LABEL_WIDTH characters and
        # ends in "…" past it: "fold" cut a long arm name mid-word on a narrow terminal. Other
        # cells wrap at spaces and fold what is left.
        longest = max((len(row[0]) for row in self.rows if row), default=0)
        for i, column in enumerate(self.columns):
            numeric = i in self.numeric
            label = i == 0 and not numeric
            table.add_column(
                column,
                overflow="ellipsis" if label else "fold",
                justify="right" if numeric else "left",
                no_wrap=label,
                min_width=min(max(longest, len(column)), LABEL_WIDTH) if label else None,
            )
        for row in self.rows:
            table.add_row(*row)
        return table


#: Characters of a row label a narrow terminal still shows whole (longer ones end in "…").
LABEL_WIDTH = 24


@dataclass(frozen=True)
class Image:
    """One PNG and its caption."""

    caption: str
    png: bytes

    @property
    def width_px(self) -> int | None:
        """The PNG's width in pixels (from its ``IHDR`` header); ``None`` if it is not a PNG."""
        if self.png[:8] != b"\x89PNG\r\n\x1a\n" or self.png[12:16] != b"IHDR":
            return None
        return int.from_bytes(self.png[16:20], "big")


@dataclass(frozen=True)
class Gallery:
    """PNG pictures side by side (e.g. reasoning maps): inline in Jupyter, captions in a terminal.

    Holds the bytes, not paths, so it stays displayable after temporary files are gone.
    Iterating yields the :class:`Image` s. In a notebook each picture is shown at its own size
    (one PNG pixel per CSS pixel, as it was drawn to be read), never wider than the output
    area: a reasoning map (770 px) takes a row of a ~900 px notebook, two on a wide screen.
    Shrunk to fit several in a row, their 9-point labels would not be legible.
    """

    title: str
    images: tuple[Image, ...] = ()
    width_px: int | None = None  # shown width of each picture; None: its own width
    note: str = ""  # shown when there are no images (why)

    @classmethod
    def from_files(
        cls, title: str, files: Iterable[tuple[str, Path]], *, note: str = ""
    ) -> Gallery:
        """A gallery of ``(caption, path)`` PNG files, read now."""
        return cls(title, tuple(Image(c, Path(p).read_bytes()) for c, p in files), note=note)

    def __len__(self) -> int:
        return len(self.images)

    def __iter__(self) -> Iterator[Image]:
        return iter(self.images)

    def _repr_html_(self) -> str:
        figures = "".join(self._figure_html(i) for i in self.images)
        if not self.images:
            figures = f'<div class="note">{html.escape(self.note or "no pictures")}</div>'
        return (
            f'{_STYLE}<div class="sarl-result"><b>{html.escape(self.title)}</b><br/>{figures}</div>'
        )

    def _figure_html(self, image: Image) -> str:
        width = self.width_px or image.width_px
        # max-width inline too, for viewers that drop <style> blocks when they sanitize HTML.
        size = f' width="{width}"' if width else ""
        return (
            f'<figure><img src="data:image/png;base64,{base64.b64encode(image.png).decode()}"'
            f'{size} style="max-width:100%;height:auto" alt="{html.escape(image.caption)}"/>'
            f"<figcaption>{html.escape(image.caption)}</figcaption></figure>"
        )

    def __rich__(self) -> RenderableType:
        lines = [f"[bold]{_markup(self.title)}[/bold]"]
        lines += [f"  {_markup(i.caption)} (PNG, {len(i.png):,} bytes)" for i in self.images]
        if not self.images:
            lines.append(f"  {_markup(self.note or 'no pictures')}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return to_text(self)


@dataclass(frozen=True)
class Section:
    """A heading line, then tables: what each result object renders."""

    heading: str
    tables: Sequence[Table] = ()
    lines: Sequence[str] = field(default_factory=tuple)  # plain lines under the heading

    def to_html(self) -> str:
        lines = "".join(f'<div class="note">{html.escape(line)}</div>' for line in self.lines)
        tables = "".join(t.to_html() for t in self.tables)
        return (
            f'{_STYLE}<div class="sarl-result"><b>{html.escape(self.heading)}</b>'
            f"{lines}{tables}</div>"
        )

    def to_rich(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        parts: list[RenderableType] = [Text(self.heading, style="bold")]
        parts += [Text(line) for line in self.lines]
        parts += [t.to_rich() for t in self.tables]
        return Group(*parts)


class Rendered:
    """Mixin of the result types: ``_repr_html_``, ``__rich__`` and ``__str__`` from one
    :class:`Section` that the subclass builds in ``_section()``; ``print`` wraps at
    ``_text_width`` columns."""

    _text_width: ClassVar[int] = 120

    def _section(self) -> Section:
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self._section().to_html()

    def __rich__(self) -> RenderableType:
        return self._section().to_rich()

    def __str__(self) -> str:
        return to_text(self, width=self._text_width)


def figure(**kwargs: Any) -> Figure:
    """A bare matplotlib ``Figure(**kwargs)`` that Jupyter shows inline as a PNG.

    Bare figures keep no pyplot state (nothing to close, no backend switch), but IPython only
    renders them once ``%matplotlib inline`` registered its formatter; this one also has
    ``_repr_png_``, so returning it from a cell is enough. With the formatter registered,
    IPython uses that instead (one picture either way).
    """
    return _inline_figure_class()(**kwargs)


@functools.cache
def _inline_figure_class() -> type[Figure]:
    from matplotlib.figure import Figure

    class InlineFigure(Figure):
        def _repr_png_(self) -> bytes:
            buffer = io.BytesIO()
            self.savefig(buffer, format="png", dpi=100)
            return buffer.getvalue()

    return InlineFigure


def to_text(renderable: object, width: int = 120) -> str:
    """What ``rich.print(renderable)`` would print, as plain text (no colours)."""
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text().rstrip("\n")


def _markup(value: str) -> str:
    from rich.markup import escape

    return escape(value)


__all__ = [
    "MISSING",
    "Gallery",
    "Image",
    "Section",
    "Table",
    "figure",
    "number",
    "text",
    "to_text",
]
