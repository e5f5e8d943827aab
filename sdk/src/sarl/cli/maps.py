"""``sarl map``: draw the reasoning map of one JSON line's response as a PNG; also the maps
``sarl reward score structure --out DIR`` writes (:func:`draw_line_maps`).

Reads the same JSON Lines as ``sarl reward score structure``; ``--index``/``-l`` is the 0-based
position of the line among the non-blank lines of the file (``-n`` is ``--namespace`` in every
other command, so it is not used here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sarl.cli import options as opt
from sarl.rewards.structure.requests import RequestError, parse_request, score_requests
from sarl.rewards.text import encodable

if TYPE_CHECKING:
    from sarl.cli.structure_lines import StructureLine


def map_command(
    input: Annotated[str, typer.Option("--input", "-i", help="JSON Lines file.", metavar="FILE")],
    index: Annotated[
        int,
        typer.Option(
            "--index", "-l", help="0-based index of the line (non-blank lines).", metavar="N"
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.", metavar="FILE")],
    clustering: opt.ClusteringOpt = opt.Clustering.kmeans,
    variant: opt.VariantOption = opt.VariantOpt.full,
    embedder: opt.EmbedderOpt = opt.EmbedderKind.local,
    embedding_url: opt.UrlOpt = None,
    embedding_model: opt.ModelOpt = None,
    delimiter: opt.DelimiterOpt = "\\n\\n",
    max_steps: opt.MaxStepsOpt = opt.DEFAULT_MAX_STEPS,
    degenerate_score: opt.DegenerateOpt = 0.0,
) -> None:
    """Write the reasoning-map PNG of the response on line N of the input."""
    from sarl.viz.reasoning_map import draw_reasoning_map

    config = opt.build_config(
        clustering=clustering,
        variant=variant,
        delimiter=delimiter,
        max_steps=max_steps,
        degenerate_score=degenerate_score,
    )
    path = Path(input)
    if not path.is_file():
        raise opt.fail(f"--input: no such file {input!r}")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not 0 <= index < len(lines):
        raise opt.fail(f"--index: {index} is out of range; {input} has {len(lines)} lines")
    try:
        request = parse_request(json.loads(lines[index]), config)
    except json.JSONDecodeError as e:
        raise opt.fail(f"line index {index}: invalid JSON: {e.msg}") from e
    except RequestError as e:
        raise opt.fail(f"line index {index}: {e}") from e
    needs_model = request.steps is not None and bool(request.steps.texts)
    model = opt.build_embedder(embedder, embedding_url, embedding_model) if needs_model else None
    try:
        result = score_requests([request], config, model)[0]
    except (RuntimeError, ValueError) as e:
        raise opt.fail(f"scoring failed: {e}") from e
    draw_reasoning_map(result, out, title=f"{path.name} #{index}")
    typer.echo(f"{out}  SR={result.score:.3f} steps={result.num_steps} nodes={result.num_nodes}")


def draw_line_maps(scored: list[StructureLine], out_dir: Path) -> list[Path]:
    """Reasoning maps of scored input lines, ``out_dir/line-<N>.png`` for line number N.

    Drawn from the results the lines were scored with (labels given or clustered), so a map
    shows exactly the labels its line's output carries. Files are named by line number, never
    by a field of the line; the line's ``id`` only goes into the title.
    """
    from sarl.viz.reasoning_map import draw_reasoning_map

    paths = []
    for line in scored:
        if line.result is None:
            continue
        suffix = f": {encodable(line.id[:60])}" if line.id is not None else ""
        title = f"line {line.number}{suffix}"
        paths.append(
            draw_reasoning_map(line.result, out_dir / f"line-{line.number}.png", title=title)
        )
    return paths
