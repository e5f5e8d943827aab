"""``sarl map``: draw the reasoning map of one JSON line's response as a PNG; also the maps
``sarl reward score structure --out DIR`` writes (:func:`draw_line_maps`).

Reads the same JSON Lines as ``sarl reward structure``; ``--index``/``-l`` is the 0-based
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
    from sarl.rewards.base import Sample
    from sarl.rewards.structure.reward import StructureReward


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


def draw_line_maps(
    reward: StructureReward, scored: list[tuple[int, Sample]], out_dir: Path
) -> list[Path]:
    """Reasoning maps of scored input lines, ``out_dir/line-<N>.png`` for line number N.

    The responses are scored again through the reward's own scorer (same settings, same
    embedder, whose cache makes it cheap), because the reward interface returns scores and
    components, not the maps. Files are named by line number, never by a field of the line.
    """
    from sarl.viz.reasoning_map import draw_reasoning_map

    results = reward.scorer.score_batch([sample.response for _, sample in scored])
    paths = []
    for (number, sample), result in zip(scored, results, strict=True):
        label = sample.extra.get("id")
        title = f"line {number}" + (f": {encodable(label[:60])}" if isinstance(label, str) else "")
        paths.append(draw_reasoning_map(result, out_dir / f"line-{number}.png", title=title))
    return paths
