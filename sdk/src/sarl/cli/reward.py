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

Exit codes (:data:`EXIT_OK` ...): 0 every line scored; 1 some lines could not be scored (their
error objects say why); 2 bad options; 3 internal error (a bug: one line on stderr, and the
lines of the chunk in progress get no output). Trailing blank lines are ignored; a blank line
elsewhere is an error line (it is not JSON). Lines are processed in chunks of
:data:`CHUNK_LINES` so the input can be larger than memory allows for embeddings.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Annotated, Any, TextIO

import typer

from sarl.cli import options as opt
from sarl.embedding.base import Embedder
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.requests import (
    RequestError,
    ScoreRequest,
    ScoringFailure,
    embed_requests,
    parse_request,
    score_isolated,
)

app = typer.Typer(help="Score responses with a reward.", no_args_is_help=True)

CHUNK_LINES = 1024
EXIT_OK, EXIT_INVALID_LINES, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
#: What reading one line can raise: the line's error, never the command's.
_LINE_ERRORS = (ValueError, ArithmeticError, RecursionError)

InputOpt = Annotated[
    str, typer.Option("--input", "-i", help="JSON Lines file, or '-' for standard input.")
]


@app.command("structure")
def structure_command(
    input: InputOpt = "-",
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
    with _open_input(input) as stream:
        try:
            failed = score_stream(stream, sys.stdout, config, lazy)
        except typer.Exit:
            raise
        except Exception as e:  # the contract: a crash is exit 3 with one line, never exit 1
            message = " ".join(str(e).split())[:300]
            typer.echo(f"error: internal error: {type(e).__name__}: {message}", err=True)
            raise typer.Exit(code=EXIT_INTERNAL) from e
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
    for chunk in _chunks(_numbered_lines(stream), chunk_lines):
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


def _open_input(path: str) -> Any:
    if path == "-":
        from contextlib import nullcontext

        return nullcontext(sys.stdin.buffer)
    p = Path(path)
    if not p.is_file():
        raise opt.fail(f"--input: no such file {path!r}")
    return p.open("rb")


def _blank(raw: bytes) -> bool:
    try:
        return not raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False


def _numbered_lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Yield (line number, bytes) split on ``\\n`` only; blank lines are held back and dropped
    if they end the input."""
    pending: list[tuple[int, bytes]] = []
    for number, line in enumerate(stream, start=1):  # binary streams split on b"\n" alone
        if _blank(line):
            pending.append((number, line))
            continue
        yield from pending
        pending.clear()
        yield number, line


def _chunks(items: Iterable[tuple[int, bytes]], size: int) -> Iterator[list[tuple[int, bytes]]]:
    chunk: list[tuple[int, bytes]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _error(number: int, message: str) -> dict[str, Any]:
    return {"error": f"line {number}: {message}", "line": number}


def parse_line(raw: bytes, config: StructureRewardConfig) -> ScoreRequest:
    """Decode, parse and validate one input line; :class:`RequestError` says what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"invalid UTF-8 at byte {e.start + 1} of the line") from e
    if not text.strip():
        raise RequestError("empty line (expected a JSON object)")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise RequestError(f"invalid JSON: {e.msg} at column {e.colno}") from e
    except RecursionError as e:
        raise RequestError("invalid JSON: nested too deeply") from e
    except ValueError as e:  # an integer past Python's int-string digit limit
        raise RequestError(f"invalid JSON: {str(e).split(';')[0]}") from e
    return parse_request(obj, config)


def _needs_text(request: ScoreRequest) -> bool:
    return request.steps is not None and bool(request.steps.texts)


def score_chunk(
    lines: list[tuple[int, bytes]], config: StructureRewardConfig, embedder: _LazyEmbedder
) -> list[dict[str, Any]]:
    """Parse and score one chunk; returns one output object per line, in order."""
    outputs: dict[int, dict[str, Any]] = {}
    parsed: list[tuple[int, ScoreRequest]] = []
    for number, line in lines:
        try:
            parsed.append((number, parse_line(line, config)))
        except _LINE_ERRORS as e:
            outputs[number] = _error(number, str(e) or type(e).__name__)
    ready = [(n, r) for n, r in parsed if not _needs_text(r)]  # labels/embeddings, or no steps
    text = [(n, r) for n, r in parsed if _needs_text(r)]
    if text:
        ready += _embed(text, embedder, outputs)
    results = score_isolated([r for _, r in ready], config)
    for (number, _), result in zip(ready, results, strict=True):
        if isinstance(result, ScoringFailure):
            outputs[number] = _error(number, f"scoring failed: {result.message}")
        else:
            outputs[number] = result.to_dict()
    return [outputs[number] for number, _ in lines]


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
            outputs[number] = _error(number, f"embedder unavailable: {reason}")
        return []
    try:
        embedded = embed_requests([r for _, r in text], model)
    except (RuntimeError, ValueError) as e:  # the embedding service down, a bad reply
        for number, _ in text:
            outputs[number] = _error(number, f"embedding failed: {e}")
        return []
    return [(number, r) for (number, _), r in zip(text, embedded, strict=True)]
