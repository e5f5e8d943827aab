"""CLI options shared by several commands, and their mapping onto the typed config.

The structure-reward options mirror ``StructureRewardConfig`` and ``EmbedderConfig`` (the single
source of truth); this module only turns flags into those models and reports invalid values
cleanly. The options of the commands that read the local store (``--workdir``,
``--tracking-uri``) and edit a spec (``--set``) are defined here once, so that every command
spells and explains them alike.

Conventions of the whole CLI: placeholders are ``FILE``, ``DIR``, ``NAME``, ``URI``, ``URL``,
``N``, ``SECONDS`` and ``KEY=VALUE``; a short flag means one thing everywhere (``-i`` input,
``-o`` output, ``-n`` namespace, ``-h`` help; ``tests/sarl/cli/test_conventions.py`` checks it).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from sarl.embedding.base import Embedder
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.rewards.structure.config import DEFAULT_MAX_STEPS, StructureRewardConfig


class Clustering(StrEnum):
    kmeans = "kmeans"
    hdbscan = "hdbscan"


class VariantOpt(StrEnum):
    full = "full"
    c_only = "c_only"
    l_only = "l_only"


class EmbedderKind(StrEnum):
    local = "local"
    openai = "openai"


#: No --workdir: the commands take :func:`sarl.workdir.default_workdir`, as sarl.Client.local()
#: does (notebooks and the CLI share one store and cache).
DEFAULT_WORKDIR: Path | None = None

WorkdirOpt = Annotated[
    Path | None,
    typer.Option(
        "--workdir",
        help="Local state: the MLflow store (DIR/mlflow.db), checkpoints and caches. Default: "
        "$SARL_WORKDIR, else the nearest .sarl here or above, else .sarl at the top of the git "
        "checkout, else ./.sarl.",
        metavar="DIR",
        show_default=False,
    ),
]
TrackingUriOpt = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        help="MLflow server or store. Default: spec.tracking.mlflow_uri, else the store under "
        "--workdir.",
        metavar="URI",
        show_default=False,
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Change a field of the document before it is validated, e.g. --set "
        "spec.algorithm.max_steps=5 (VALUE is YAML; list items as reward[0]). Repeatable.",
        metavar="KEY=VALUE",
        show_default=False,
    ),
]

ClusteringOpt = Annotated[
    Clustering, typer.Option("--clustering", help="KMeans (k=round(sqrt(M))) or HDBSCAN.")
]
VariantOption = Annotated[
    VariantOpt, typer.Option("--variant", help="full = C/2 + 1/(1+L); ablations c_only, l_only.")
]
EmbedderOpt = Annotated[
    EmbedderKind,
    typer.Option("--embedder", help="local sentence-transformers model or OpenAI-compatible URL."),
]
UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--embedding-url",
        help="Base URL of an OpenAI-compatible /v1/embeddings server.",
        metavar="URL",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--embedding-model",
        help="local: model directory (default: bundled all-MiniLM-L6-v2); openai: model name.",
        metavar="NAME",
    ),
]
DelimiterOpt = Annotated[
    str,
    typer.Option(
        "--delimiter", help="Step delimiter (escapes like \\n are decoded).", metavar="TEXT"
    ),
]
MaxStepsOpt = Annotated[
    int, typer.Option("--max-steps", help="Steps scored per response (cap).", metavar="N")
]
DegenerateOpt = Annotated[
    float,
    typer.Option(
        "--degenerate-score", help="Score of maps with fewer than two nodes.", metavar="SCORE"
    ),
]


def fail(message: str) -> typer.Exit:
    """Print a one-line error to stderr and return the Exit to raise (code 2: usage error)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def build_config(
    *,
    clustering: Clustering,
    variant: VariantOpt,
    delimiter: str,
    max_steps: int,
    degenerate_score: float,
) -> StructureRewardConfig:
    try:
        return StructureRewardConfig(
            clustering=clustering.value,
            variant=variant.value,
            delimiter=delimiter.encode("utf-8").decode("unicode_escape"),
            max_steps=max_steps,
            degenerate_score=degenerate_score,
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise fail(
            f"--{str(err['loc'][0]).replace('_', '-')}={err['input']!r}: {err['msg']}"
        ) from e


def build_embedder(kind: EmbedderKind, url: str | None, model: str | None) -> Embedder:
    if kind is EmbedderKind.openai and not url:
        raise fail("--embedding-url is required with --embedder openai")
    if kind is EmbedderKind.openai and not model:
        raise fail("--embedding-model is required with --embedder openai")
    try:
        return make_embedder(EmbedderConfig(kind=kind.value, url=url, model=model))
    except (ValueError, RuntimeError) as e:
        raise fail(str(e)) from e


__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_WORKDIR",
    "SetOpt",
    "TrackingUriOpt",
    "WorkdirOpt",
    "build_config",
    "build_embedder",
    "fail",
]
