"""``sarl reward``'s group, and ``sarl reward structure``: the old name of ``sarl reward score
structure`` (hidden), kept with its own options and output until it is removed.

The old name behaves as before, after one line on stderr naming the new command: options
``--clustering``/``--variant``/``--embedder``/``--embedding-url``/``--embedding-model``/
``--delimiter``/``--max-steps``/``--degenerate-score`` (the structure reward's settings, which
``sarl reward score structure`` takes as ``--set KEY=VALUE`` or ``--settings FILE``), and output
objects with exactly the keys of
:data:`~sarl.rewards.structure.result.OUTPUT_KEYS`. The lines are scored by
:mod:`sarl.cli.structure_lines`, the engine of the new name.

Exit codes and the line contract are :mod:`sarl.cli.lines`'s: 0 every line scored; 1 some lines
could not be scored (their error objects say why); 2 bad options; 3 internal error (a bug: one
line on stderr, and the lines of the chunk in progress get no output).
"""

from __future__ import annotations

import json
import sys
from typing import IO, TextIO

import typer

from sarl.cli import lines
from sarl.cli import options as opt
from sarl.cli.lines import CHUNK_LINES, EXIT_INTERNAL, EXIT_INVALID_LINES, EXIT_OK, EXIT_USAGE
from sarl.cli.structure_lines import LazyEmbedder, score_lines
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.result import StructureResult

app = typer.Typer(help="Score responses with a reward.", no_args_is_help=True)

__all__ = ["CHUNK_LINES", "EXIT_INTERNAL", "EXIT_INVALID_LINES", "EXIT_OK", "EXIT_USAGE", "app"]

#: What the old name prints before it runs (on stderr, so the lines on stdout are unchanged).
RENAMED = (
    "note: `sarl reward structure` is now `sarl reward score structure` (its options are "
    "settings there: --set clustering=hdbscan); the old name will be removed"
)


@app.command("structure", hidden=True)
def structure_command(
    input: lines.InputOpt = "-",
    clustering: opt.ClusteringOpt = opt.Clustering.kmeans,
    variant: opt.VariantOption = opt.VariantOpt.full,
    embedder: opt.EmbedderOpt = opt.EmbedderKind.local,
    embedding_url: opt.UrlOpt = None,
    embedding_model: opt.ModelOpt = None,
    delimiter: opt.DelimiterOpt = "\\n\\n",
    max_steps: opt.MaxStepsOpt = opt.DEFAULT_MAX_STEPS,
    degenerate_score: opt.DegenerateOpt = 0.0,
) -> None:
    """Old name of `sarl reward score structure`: score each JSON line with the structure reward.

    One JSON object per input line, in order: its score or {"error": "line N: ...", "line": N}.

    Exit codes:
    0 = every line scored;
    1 = some lines could not be scored (see their error objects);
    2 = bad options;
    3 = internal error (one line on stderr; output stops).
    """
    typer.echo(RENAMED, err=True)
    config = opt.build_config(
        clustering=clustering,
        variant=variant,
        delimiter=delimiter,
        max_steps=max_steps,
        degenerate_score=degenerate_score,
    )
    if embedder is opt.EmbedderKind.openai:  # check flags before reading any input
        opt.build_embedder(embedder, embedding_url, embedding_model)
    lazy = LazyEmbedder(lambda: opt.build_embedder(embedder, embedding_url, embedding_model))
    with lines.open_input(input) as stream, lines.internal_errors():
        failed = score_stream(stream, sys.stdout, config, lazy)
    raise typer.Exit(code=EXIT_INVALID_LINES if failed else EXIT_OK)


def score_stream(
    stream: IO[bytes],
    out: TextIO,
    config: StructureRewardConfig,
    embedder: LazyEmbedder,
    *,
    chunk_lines: int = CHUNK_LINES,
) -> bool:
    """Score every line of ``stream`` to ``out`` in the old name's output (one JSON object per
    line, flushed per chunk); True if some line could not be scored."""
    failed = False
    for batch in score_lines(
        stream, config, embedder, StructureResult.to_dict, chunk_lines=chunk_lines
    ):
        for line in batch:
            failed = failed or "error" in line.row
            out.write(json.dumps(line.row) + "\n")
        out.flush()
    return failed
