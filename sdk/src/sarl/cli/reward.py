"""``sarl reward structure``: score JSON Lines with the structure reward (the CLI contract).

Input: one JSON object per line (see ``sarl.rewards.structure.requests`` for the fields). The
input is read as bytes and split on ``\\n`` only: a ``\\r`` inside a line belongs to that line
(JSON whitespace, or an invalid character inside a string), and each line is decoded as UTF-8
on its own, so invalid UTF-8 is that line's error.

Output on stdout: one JSON object per input line, in order, with exactly the keys ``score``,
``clustering``, ``path_length`` (null when undefined), ``num_steps``, ``num_nodes``,
``num_edges``, ``labels`` — or ``{"error": "line N: ...", "line": N}`` for a line that could not
be scored. A line's problem is that line's error and never changes another line's result:
anything a line can hold (JSON nested past the recursion limit, integers past Python's digit
limit or float64's range, embeddings of any finite magnitude) is validated or scored on its own.
The one shared failure is the embedder's (a service down): every text line of the chunk being
embedded reports it; lines with labels or embeddings are unaffected.

Exit codes and the line contract (bytes split on ``\\n``, trailing blank lines ignored) are
:mod:`sarl.cli.lines`'s, shared with ``sarl reward score``: 0 every line scored; 1 some lines
could not be scored (their error objects say why); 2 bad options; 3 internal error (a bug: one
line on stderr, and the lines of the chunk in progress get no output). Lines are processed in
chunks of :data:`CHUNK_LINES` so the input can be larger than memory allows for embeddings.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any, TextIO

import typer

from sarl.cli import lines
from sarl.cli import options as opt
from sarl.cli.lines import CHUNK_LINES, EXIT_INTERNAL, EXIT_INVALID_LINES, EXIT_OK, EXIT_USAGE
from sarl.embedding.base import Embedder
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.requests import (
    ScoreRequest,
    ScoringFailure,
    embed_requests,
    parse_request,
    score_isolated,
)

app = typer.Typer(help="Score responses with a reward.", no_args_is_help=True)

__all__ = ["CHUNK_LINES", "EXIT_INTERNAL", "EXIT_INVALID_LINES", "EXIT_OK", "EXIT_USAGE", "app"]


@app.command("structure")
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
    """Score each JSON line's response with the SARL structure reward (SR = C/2 + 1/(1+L)).

    One JSON object per input line, in order: its score or {"error": "line N: ...", "line": N}.

    The structure reward's own contract: step_labels or embeddings may replace the response;
    the output carries the labels.
    For responses alone, `sarl reward score structure` scores it as any reward.

    Exit codes:
    0 = every line scored;
    1 = some lines could not be scored (see their error objects);
    2 = bad options;
    3 = internal error (one line on stderr; output stops).
    """
    config = opt.build_config(
        clustering=clustering,
        variant=variant,
        delimiter=delimiter,
        max_steps=max_steps,
        degenerate_score=degenerate_score,
    )
    if embedder is opt.EmbedderKind.openai:  # check flags before reading any input
        opt.build_embedder(embedder, embedding_url, embedding_model)
    lazy = _LazyEmbedder(lambda: opt.build_embedder(embedder, embedding_url, embedding_model))
    with lines.open_input(input) as stream, lines.internal_errors():
        failed = score_stream(stream, sys.stdout, config, lazy)
    raise typer.Exit(code=EXIT_INVALID_LINES if failed else EXIT_OK)


def score_stream(
    stream: IO[bytes],
    out: TextIO,
    config: StructureRewardConfig,
    embedder: _LazyEmbedder,
    *,
    chunk_lines: int = CHUNK_LINES,
) -> bool:
    """Score every line of ``stream`` to ``out`` (one JSON object per line, flushed per chunk);
    True if some line could not be scored. Exceptions other than a line's own are bugs."""
    failed = False
    for chunk in lines.chunks(lines.numbered_lines(stream), chunk_lines):
        for row in score_chunk(chunk, config, embedder):
            failed = failed or "error" in row
            out.write(json.dumps(row) + "\n")
        out.flush()
    return failed


class _LazyEmbedder:
    """Builds the embedder only when some line needs text embedded (labels-only input needs no
    model)."""

    def __init__(self, build: Any) -> None:
        self._build = build
        self._value: Embedder | None = None

    def get(self) -> Embedder:
        if self._value is None:
            self._value = self._build()
        return self._value


def parse_line(raw: bytes, config: StructureRewardConfig) -> ScoreRequest:
    """Decode, parse and validate one input line; a ValueError subclass says what is wrong."""
    return parse_request(lines.decode_json(raw), config)


def _needs_text(request: ScoreRequest) -> bool:
    return request.steps is not None and bool(request.steps.texts)


def score_chunk(
    chunk: list[tuple[int, bytes]], config: StructureRewardConfig, embedder: _LazyEmbedder
) -> list[dict[str, Any]]:
    """Parse and score one chunk; returns one output object per line, in order."""
    outputs: dict[int, dict[str, Any]] = {}
    parsed: list[tuple[int, ScoreRequest]] = []
    for number, line in chunk:
        try:
            parsed.append((number, parse_line(line, config)))
        except lines.LINE_ERRORS as e:
            outputs[number] = lines.line_error(number, str(e) or type(e).__name__)
    ready = [(n, r) for n, r in parsed if not _needs_text(r)]  # labels/embeddings, or no steps
    text = [(n, r) for n, r in parsed if _needs_text(r)]
    if text:
        ready += _embed(text, embedder, outputs)
    results = score_isolated([r for _, r in ready], config)
    for (number, _), result in zip(ready, results, strict=True):
        if isinstance(result, ScoringFailure):
            outputs[number] = lines.line_error(number, f"scoring failed: {result.message}")
        else:
            outputs[number] = result.to_dict()
    return [outputs[number] for number, _ in chunk]


def _embed(
    text: list[tuple[int, ScoreRequest]],
    embedder: _LazyEmbedder,
    outputs: dict[int, dict[str, Any]],
) -> list[tuple[int, ScoreRequest]]:
    """The text requests with their steps embedded; on an embedder failure, each of them
    gets the error in ``outputs`` instead (the failure concerns them all)."""
    try:
        model = embedder.get()
    except (typer.Exit, RuntimeError, ValueError) as e:
        reason = str(e) or "could not build the embedder (see the message above)"
        for number, _ in text:
            outputs[number] = lines.line_error(number, f"embedder unavailable: {reason}")
        return []
    try:
        embedded = embed_requests([r for _, r in text], model)
    except (RuntimeError, ValueError) as e:  # the embedding service down, a bad reply
        for number, _ in text:
            outputs[number] = lines.line_error(number, f"embedding failed: {e}")
        return []
    return [(number, r) for (number, _), r in zip(text, embedded, strict=True)]
