"""Draw one response's reasoning map as a PNG, in the spirit of SARL v2 Figure 2(b).

Called by ``sarl map``, ``sarl demo``, ``sarl reward score --out`` and the local runner's MLflow
logging (:mod:`sarl.runner.maps`, which passes what the map is of: arm, step, prompt, response,
correctness). Top panel: the map — one node per latent reasoning function, area proportional to
the steps it holds, one edge per distinct transition. Middle panel: the step order — which
function each step used, so the path through the map can be read left to right; its axes tick
whole steps and functions only. Optional bottom text: a caption (e.g. the prompt and the
response). Figures are plain matplotlib ``Figure`` s, never shown (no display needed).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from sarl.rewards.structure.result import StructureResult

#: Characters per caption line: a 7-inch figure holds about 89 of 9-point monospace.
_CAPTION_WIDTH = 86


def _circle_layout(n: int) -> list[tuple[float, float]]:
    if n == 1:
        return [(0.0, 0.0)]
    # Start at the top and go clockwise so node 0 (the first function used) is easy to find.
    return [
        (math.cos(math.pi / 2 - 2 * math.pi * k / n), math.sin(math.pi / 2 - 2 * math.pi * k / n))
        for k in range(n)
    ]


def plain_text(text: str) -> str:
    """``text`` as matplotlib shows it literally: a ``$`` would start math mode (responses
    hold prices and LaTeX), so it is escaped."""
    return text.replace("$", r"\$")


def draw_reasoning_map(
    result: StructureResult, out: str | Path, *, title: str = "", caption: str = ""
) -> Path:
    """Write the picture of ``result``'s map to ``out`` (PNG) and return the path.

    ``title`` and ``caption`` are drawn as :func:`reasoning_map_figure` says, and also stored
    as the PNG's ``Title`` and ``Description`` text, so tools can read what a map is of."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = reasoning_map_figure(result, title=title, caption=caption)
    labels = {k: v for k, v in (("Title", title), ("Description", caption)) if v}
    fig.savefig(path, dpi=110, metadata=labels)
    return path


def reasoning_map_figure(result: StructureResult, *, title: str = "", caption: str = "") -> Any:
    """The matplotlib ``Figure`` of ``result``'s map (not registered with pyplot: nothing to
    close). ``title`` goes above the scores; ``caption`` (lines wrapped to the figure's width)
    below the step order. Both are shown literally (no math mode)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    graph = result.graph
    lines = _wrap(caption)
    caption_in = 0.2 * len(lines) + (0.2 if lines else 0.0)  # figure inches the caption needs
    fig = Figure(figsize=(7, 8.5 + caption_in))
    ax_map, ax_walk = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 1.2]})
    cmap = colormaps["tab20"]
    pos = _circle_layout(max(graph.num_nodes, 1))
    for u, v in graph.edges:
        ax_map.plot(*zip(pos[u], pos[v], strict=True), color="#888888", lw=2, zorder=1)
    biggest = max(graph.node_sizes, default=1)
    for k, size in enumerate(graph.node_sizes):
        x, y = pos[k]
        ax_map.scatter(
            [x],
            [y],
            s=400 + 2600 * size / biggest,
            color=cmap(k % 20),
            zorder=2,
            edgecolors="black",
        )
        ax_map.annotate(
            f"F{k}\n{size} step{'s' if size != 1 else ''}",
            (x, y),
            ha="center",
            va="center",
            fontsize=9,
            zorder=3,
        )
    ax_map.set_xlim(-1.6, 1.6)
    ax_map.set_ylim(-1.6, 1.6)
    ax_map.set_aspect("equal")
    ax_map.axis("off")
    path_text = "undefined" if result.path_length is None else f"{result.path_length:.3f}"
    ax_map.set_title(
        (f"{plain_text(title)}\n" if title else "")
        + f"SR = {result.score:.3f}   C = {result.clustering:.3f}   L = {path_text}\n"
        + f"{_count(result.num_steps, 'step')}, {_count(graph.num_nodes, 'function')}, "
        + _count(graph.num_edges, "edge")
        + ("  (truncated)" if result.truncated else ""),
        fontsize=11,
    )
    _draw_walk(ax_walk, result, cmap)
    if lines:
        # Reserve the bottom of the figure for the caption before tight_layout places the axes.
        fig.tight_layout(rect=(0, caption_in / fig.get_figheight(), 1, 1))
        fig.text(
            0.02,
            (caption_in - 0.1) / fig.get_figheight(),
            "\n".join(plain_text(line) for line in lines),
            ha="left",
            va="top",
            fontsize=9,
            family="monospace",
        )
    else:
        fig.tight_layout()
    return fig


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _wrap(caption: str) -> list[str]:
    """The caption's lines, each wrapped to :data:`_CAPTION_WIDTH` (continuations indented)."""
    out: list[str] = []
    for line in caption.splitlines():
        out.extend(
            textwrap.wrap(line, _CAPTION_WIDTH, subsequent_indent="  ", break_long_words=True)
            or [""]
        )
    return out


def _draw_walk(ax: Any, result: StructureResult, cmap: Any) -> None:
    """Step order: x = step number, y = reasoning function.

    The limits are set, not autoscaled: around a single step matplotlib would widen the axis
    to 0.94..1.06 and tick fractions of a step. Every step is ticked up to 20 steps, then whole
    numbers only; every function is ticked."""
    from matplotlib.ticker import MaxNLocator

    walk = result.graph.walk
    nodes = result.graph.num_nodes
    ax.set_title("step order", fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel("function")
    if not walk:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no steps", ha="center", va="center", transform=ax.transAxes)
        return
    steps = list(range(1, len(walk) + 1))
    ax.plot(steps, walk, color="#bbbbbb", lw=1, zorder=1)
    colors = [cmap(k % 20) for k in walk]
    ax.scatter(steps, walk, c=colors, s=40, zorder=2, edgecolors="black", linewidths=0.5)
    ax.set_xlim(0.5, len(walk) + 0.5)
    if len(walk) <= 20:
        ax.set_xticks(steps)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_ylim(-0.5, max(nodes, 1) - 0.5)
    ax.set_yticks(range(nodes))
    ax.set_yticklabels([f"F{k}" for k in range(nodes)])
