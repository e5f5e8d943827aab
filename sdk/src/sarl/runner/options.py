"""The knobs of a local run that are not part of the Experiment: :class:`LocalOptions`.

Its own module so that :mod:`sarl.runner.local` (which builds the session) and
:mod:`sarl.runner.session` (which drives it) share the type without importing each other.
Built by ``sarl run --local``, ``sarl.Client.local().run(...)`` and the local Study runner;
:mod:`sarl.runner.local` re-exports it, where callers import it from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class LocalOptions:
    """Local-run knobs that are not part of the Experiment (where, not what)."""

    workdir: Path = Path(".sarl")
    tracking_uri: str | None = None
    resume: bool = False
    #: Take over a run whose lease went stale (sarl.storage.lease): its owner stopped renewing.
    take_over: bool = False
    progress: bool = True
    #: How the caller names ``tracking_uri`` in errors about it (the CLI: ``--tracking-uri``).
    tracking_uri_flag: str = "tracking_uri"


__all__ = ["LocalOptions"]
