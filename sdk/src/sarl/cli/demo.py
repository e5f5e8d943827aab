"""``sarl demo-traces``: score the bundled sample reasoning traces and draw their reasoning maps.

What ``make demo-traces`` runs (``make demo`` is the local Study): a table of score, C, L,
steps, nodes and edges per response, one PNG per response and ``scores.jsonl`` under ``--out``.
Uses the bundled all-MiniLM-L6-v2 embedder by default, so it works offline. ``sarl demo`` is a
hidden alias (:func:`demo_alias`) that says the new name first.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

from sarl.cli import options as opt


def load_samples(path: Path | None) -> list[dict[str, Any]]:
    """The bundled samples (``sarl/data/sample_traces.jsonl``) or a user file of the same shape."""
    if path is None:
        text = resources.files("sarl.data").joinpath("sample_traces.jsonl").read_text("utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("response"), str):
            raise opt.fail(f"sample {i}: expected an object with a string 'response'")
    return rows


def demo_command(
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Directory for PNGs and scores.", metavar="DIR"),
    ] = Path("out"),
    input: Annotated[
        Path | None,
        typer.Option(
            "--input",
            "-i",
            help="JSONL samples (default: bundled).",
            metavar="FILE",
            show_default=False,
        ),
    ] = None,
    clustering: opt.ClusteringOpt = opt.Clustering.kmeans,
    embedder: opt.EmbedderOpt = opt.EmbedderKind.local,
    embedding_url: opt.UrlOpt = None,
    embedding_model: opt.ModelOpt = None,
) -> None:
    """Score sample traces with the structure reward; print a table and write reasoning maps."""
    from rich.table import Table

    from sarl.cli.help_style import console
    from sarl.rewards.structure.scorer import StructureScorer
    from sarl.viz.reasoning_map import draw_reasoning_map

    samples = load_samples(input)
    config = opt.build_config(
        clustering=clustering,
        variant=opt.VariantOpt.full,
        delimiter="\\n\\n",
        max_steps=opt.DEFAULT_MAX_STEPS,
        degenerate_score=0.0,
    )
    model = opt.build_embedder(embedder, embedding_url, embedding_model)
    with StructureScorer(config, model, workers=1) as scorer:
        results = scorer.score_batch([s["response"] for s in samples])
    out.mkdir(parents=True, exist_ok=True)
    table = Table(title="SARL structure reward — sample traces")
    for column in ("id", "score", "C", "L", "steps", "nodes", "edges", "map"):
        table.add_column(
            column, justify="left" if column in ("id", "map") else "right", no_wrap=True
        )
    with (out / "scores.jsonl").open("w", encoding="utf-8") as f:
        for i, (sample, result) in enumerate(zip(samples, results, strict=True)):
            name = str(sample.get("id", f"sample-{i}"))
            png = draw_reasoning_map(
                result, out / f"{name}.png", title=str(sample.get("title", name))
            )
            f.write(json.dumps({"id": name, **result.to_dict()}) + "\n")
            path_len = "-" if result.path_length is None else f"{result.path_length:.3f}"
            table.add_row(
                name,
                f"{result.score:.3f}",
                f"{result.clustering:.3f}",
                path_len,
                str(result.num_steps),
                str(result.num_nodes),
                str(result.num_edges),
                png.name,
            )
    console().print(table)
    typer.echo(f"wrote {len(results)} reasoning maps and scores.jsonl to {out}/")


#: What the old name prints before it runs (on stderr, so the table on stdout is unchanged).
RENAMED = (
    "note: `sarl demo` is now `sarl demo-traces` (`make demo` runs the local Study); "
    "the old name will be removed"
)


@functools.wraps(demo_command)
def demo_alias(*args: Any, **kwargs: Any) -> None:
    """``sarl demo``: the old name of ``sarl demo-traces`` (hidden), with a one-line note."""
    typer.echo(RENAMED, err=True)
    demo_command(*args, **kwargs)
