"""Where local state lives when no ``--workdir`` / ``workdir=`` is given: one answer for all.

Called by the CLI's commands that read or write the local store (``sarl run``, ``sarl study``,
``sarl compare``) and by ``sarl.Client.local()`` (the notebooks), so a notebook under
``examples/notebooks/`` and ``make demo`` at the repository's top share one MLflow store
(``mlflow.db``: experiment ids cannot collide and a printed link points at the UI that holds
the run) and one warm-start cache (the built-in policy is trained once, issue 40 item 5).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

#: The local state's directory name (the MLflow store, checkpoints, caches, spools).
WORKDIR_NAME: Final = ".sarl"
#: Overrides the search below (an absolute or working-directory-relative path).
WORKDIR_ENV: Final = "SARL_WORKDIR"


def default_workdir(cwd: Path | None = None) -> Path:
    """The local state's directory: ``$SARL_WORKDIR`` if set; else the nearest ``.sarl`` in
    ``cwd`` (default: the working directory) or a directory above it, as git finds ``.git``;
    else ``.sarl`` at the top of the enclosing git checkout (a notebook that runs first in a
    fresh clone starts the store the CLI will use); else ``cwd/.sarl``.

    Absolute unless ``$SARL_WORKDIR`` is relative; nothing is created."""
    env = os.environ.get(WORKDIR_ENV)
    if env:
        return Path(env)
    here = (cwd or Path.cwd()).resolve()
    chain = [here, *here.parents]
    for directory in chain:
        if (directory / WORKDIR_NAME).is_dir():
            return directory / WORKDIR_NAME
    for directory in chain:
        if (directory / ".git").exists():  # a directory, or a file in a worktree
            return directory / WORKDIR_NAME
    return here / WORKDIR_NAME


def resolve_workdir(workdir: str | Path | None) -> Path:
    """``workdir`` as given, else :func:`default_workdir`."""
    return default_workdir() if workdir is None else Path(workdir)


__all__ = ["WORKDIR_ENV", "WORKDIR_NAME", "default_workdir", "resolve_workdir"]
