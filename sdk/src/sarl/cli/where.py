"""Whether ``sarl run`` / ``sarl study run`` without ``--local`` trains here.

Called by :mod:`sarl.cli.run` and :mod:`sarl.cli.study_run`. With no cluster configured (no
kubeconfig, not in a pod: :func:`sarl.cluster.connection.configured_cluster`) there is nowhere
else to run, so the command trains here and says so in one line on stderr. With a cluster
configured it stops and names both ways: ``--local`` here, ``sarl submit`` there; it never
submits on its own, since training here by mistake costs minutes and on a cluster GPUs.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from sarl.cli.options import fail


def here_or_fail(name: str, command: str, source: Path) -> None:
    """Return (after one line on stderr) when ``command`` should train ``name`` here without
    ``--local``; exit 2 naming ``--local`` and ``sarl submit`` when a cluster is configured."""
    from sarl.cluster.connection import configured_cluster

    cluster = configured_cluster(os.environ)
    if cluster is not None:
        raise fail(
            f"{command} {source}: a cluster is configured ({cluster}); add --local to train "
            f"{name!r} here, or run it there with `sarl submit {source}`"
        )
    typer.echo(
        f"{name}: no cluster configured (no kubeconfig, not in a pod): training here, as "
        "--local does",
        err=True,
    )
