"""The JSON Lines contract shared by ``sarl reward score`` (every reward, ``structure``'s own
lines included) and ``sarl reward diagnose``.

Input is read as bytes and split on ``\\n`` only: a ``\\r`` inside a line belongs to that line
(JSON whitespace, or an invalid character inside a string), and each line is decoded as UTF-8 on
its own, so invalid UTF-8 is that line's error. Trailing blank lines are ignored; a blank line
elsewhere is an error line (it is not JSON). Output is one JSON object per input line, in input
order: the line's result or :func:`line_error`'s ``{"error": "line N: ...", "line": N}``.

Exit codes are the same for both commands (:data:`EXIT_OK` ...): 0 every line scored; 1 some
lines could not be scored; 2 bad options; 3 internal error (a bug: one line on stderr, see
:func:`internal_errors`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from sarl import finite_json
from sarl.cli import options as opt

CHUNK_LINES = 1024
EXIT_OK, EXIT_INVALID_LINES, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
#: What reading or scoring one line can raise: the line's error, never the command's.
LINE_ERRORS = (ValueError, ArithmeticError, RecursionError)

InputOpt = Annotated[
    str,
    typer.Option(
        "--input", "-i", help="JSON Lines file, or '-' for standard input.", metavar="FILE"
    ),
]


class LineError(ValueError):
    """A line is not a JSON value (bad UTF-8, blank, invalid or too deeply nested JSON)."""


def open_input(path: str) -> AbstractContextManager[IO[bytes]]:
    """The input as a binary stream (``-``: standard input); a missing file is a usage error."""
    if path == "-":
        return nullcontext(sys.stdin.buffer)
    p = Path(path)
    if not p.is_file():
        raise opt.fail(f"--input: no such file {path!r}")
    return p.open("rb")


def is_blank(raw: bytes) -> bool:
    try:
        return not raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False


def numbered_lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Yield (line number, bytes) split on ``\\n`` only; blank lines are held back and dropped
    if they end the input."""
    pending: list[tuple[int, bytes]] = []
    for number, line in enumerate(stream, start=1):  # binary streams split on b"\n" alone
        if is_blank(line):
            pending.append((number, line))
            continue
        yield from pending
        pending.clear()
        yield number, line


def chunks(items: Iterable[tuple[int, bytes]], size: int) -> Iterator[list[tuple[int, bytes]]]:
    chunk: list[tuple[int, bytes]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def line_error(number: int, message: str) -> dict[str, Any]:
    """The output object of a line that could not be scored."""
    return {"error": f"line {number}: {message}", "line": number}


def one_line(error: BaseException, limit: int = 300) -> str:
    """An exception as one line of at most ``limit`` characters (messages may hold newlines)."""
    message = " ".join(str(error).split()) or type(error).__name__
    return message if len(message) <= limit else message[: limit - 3] + "..."


def decode_json(raw: bytes) -> Any:
    """Decode one line as UTF-8 and parse it as strict JSON (:func:`sarl.finite_json.loads`);
    :class:`LineError` says what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LineError(f"invalid UTF-8 at byte {e.start + 1} of the line") from e
    if not text.strip():
        raise LineError("empty line (expected a JSON object)")
    try:
        return finite_json.loads(text)  # the services' contract: no NaN, Infinity or 1e309
    except finite_json.NonFiniteNumber as e:
        raise LineError(str(e)) from e
    except json.JSONDecodeError as e:
        raise LineError(f"invalid JSON: {e.msg} at column {e.colno}") from e
    except RecursionError as e:
        raise LineError("invalid JSON: nested too deeply") from e
    except ValueError as e:  # an integer past Python's int-string digit limit
        raise LineError(f"invalid JSON: {str(e).split(';')[0]}") from e


@contextmanager
def internal_errors() -> Iterator[None]:
    """Turn any exception but ``typer.Exit`` into exit 3 with one line on stderr: the contract
    says a crash is never mistaken for exit 1 (some lines invalid)."""
    try:
        yield
    except typer.Exit:
        raise
    except Exception as e:
        typer.echo(f"error: internal error: {type(e).__name__}: {one_line(e)}", err=True)
        raise typer.Exit(code=EXIT_INTERNAL) from e
