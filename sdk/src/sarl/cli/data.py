"""``sarl data prepare``: turn a public dataset file into verl parquet (local dir or S3).

Registered in :mod:`sarl.cli.main` as the ``data`` group. The work is in
:func:`sarl.datasets.prepare`; this module parses flags, prints the one-line report and maps
bad input (unknown source, missing column, empty result, unreachable bucket) to exit code 2
with one ``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sarl.datasets.filters import MIN_RESPONSE_TOKENS
from sarl.datasets.sources import SOURCES

app = typer.Typer(help="Prepare training and benchmark datasets.", no_args_is_help=True)

_SOURCES = ", ".join(sorted(SOURCES))


@app.command("prepare")
def prepare_command(
    source: Annotated[
        str, typer.Argument(help=f"Dataset: {_SOURCES}.", metavar="NAME", show_default=False)
    ],
    input: Annotated[
        Path,
        typer.Option(
            "--input", "-i", help="Local CSV, JSON, JSONL or Parquet file.", metavar="FILE"
        ),
    ],
    out: Annotated[
        str,
        typer.Option(
            "--out",
            "-o",
            help="Directory or s3://bucket/prefix; files go to train/ or benchmarks/.",
            metavar="DIR|URI",
        ),
    ] = ".sarl/data",
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="train or benchmark (default: the source's own).",
            metavar="SPLIT",
            show_default=False,
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="Local Hugging Face tokenizer dir (openrubrics length filter).",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    max_rows: Annotated[
        int | None,
        typer.Option(
            "--max-rows",
            help="Keep at most N rows (after filtering).",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            "--endpoint-url",
            help="S3/MinIO endpoint (default: AWS_ENDPOINT_URL).",
            metavar="URL",
            show_default=False,
        ),
    ] = None,
    prompt_template: Annotated[
        str | None,
        typer.Option(
            "--prompt-template",
            help="Format string with {question} (default: paper).",
            metavar="TEXT",
            show_default=False,
        ),
    ] = None,
    min_response_tokens: Annotated[
        int,
        typer.Option("--min-response-tokens", help="Both references must be longer.", metavar="N"),
    ] = MIN_RESPONSE_TOKENS,
    max_response_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-response-tokens",
            help="Optional upper bound (v1: 4096).",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Progress bar while counting tokens.")] = True,
) -> None:
    """Read SOURCE from --input, apply the papers' filters, write verl parquet to --out."""
    from sarl.datasets.filters import hf_token_counter
    from sarl.datasets.prepare import prepare
    from sarl.datasets.sources import get_source
    from sarl.datasets.tables import DatasetError
    from sarl.storage.base import StorageError

    try:
        if split not in (None, "train", "benchmark"):
            raise DatasetError(f"--split: expected train or benchmark, got {split!r}")
        src = get_source(source)
        counter = hf_token_counter(tokenizer, progress=progress) if tokenizer else None
        report = prepare(
            src,
            input,
            out,
            split="train" if split == "train" else "benchmark" if split else None,
            count_tokens=counter,
            max_rows=max_rows,
            template=prompt_template,
            min_tokens=min_response_tokens,
            max_tokens=max_response_tokens,
            endpoint_url=endpoint_url,
        )
    except (DatasetError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(code=2) from None
    print(report.summary())
