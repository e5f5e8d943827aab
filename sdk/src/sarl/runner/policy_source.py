"""Where a local run finds its policy: a directory, or a Hub id in the Hugging Face cache.

Called by :mod:`sarl.runner.preflight` (a model that is not on disk fails in seconds, with one
line) and :class:`sarl.runner.session.LocalSession` (what ``from_pretrained`` is given).

``spec.model.name`` may be

* a local directory of Hugging Face files (``./my-model``, ``~/models/x``, ``/data/x``, or a
  relative ``out/x`` that exists: a directory wins over a Hub id of the same spelling);
* a Hub id (``org/name`` or ``hf://org/name``) already in the Hugging Face cache: the newest
  snapshot of ``main`` is loaded from disk, without the network;
* a Hub id that is not cached: refused, naming the cache looked in, unless downloads are allowed
  (:data:`ALLOW_DOWNLOADS` = ``1``): then ``from_pretrained`` downloads it.

The cache is the one ``huggingface_hub`` uses (its ``constants.py``, v1.x): ``$HF_HUB_CACHE``,
else ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
else ``~/.cache/huggingface/hub``. Read from the environment given, so tests pass their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sarl.spec.model_source import ModelUriError, parse_model_uri

#: Set to ``1`` to let a local run download a policy that is not on disk (off by default:
#: a local run never reaches the network for weights unless asked to).
ALLOW_DOWNLOADS = "SARL_ALLOW_DOWNLOADS"
FIELD = "spec.model.name"


class PolicyNotFound(ValueError):
    """The policy is neither a directory nor cached, and downloads are off; one line."""


@dataclass(frozen=True)
class PolicySource:
    """What ``from_pretrained`` loads (a directory, or a Hub id to download) and whether it may
    reach the network for it."""

    target: str
    offline: bool
    where: str  # "directory", "cache" or "download": said in the run's status line


def hub_cache(env: Mapping[str, str]) -> Path:
    """The Hugging Face Hub cache directory that ``env`` selects (module docstring)."""
    explicit = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = env.get("HF_HOME") or str(
        Path(env.get("XDG_CACHE_HOME") or Path("~/.cache").expanduser()) / "huggingface"
    )
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def downloads_allowed(env: Mapping[str, str]) -> bool:
    return env.get(ALLOW_DOWNLOADS, "").strip().lower() in ("1", "true", "yes")


def cached_snapshot(cache: Path, repo_id: str, revision: str = "main") -> Path | None:
    """The snapshot directory of ``repo_id`` at ``revision`` in ``cache`` when it holds a
    ``config.json``; the layout is huggingface_hub's (``models--org--name/refs/<revision>`` holds
    the commit, ``snapshots/<commit>/`` the files; file_download.py, ``try_to_load_from_cache``)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    try:
        commit = (repo / "refs" / revision).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    snapshot = repo / "snapshots" / commit
    return snapshot if commit and (snapshot / "config.json").is_file() else None


def resolve_policy(name: str, env: Mapping[str, str]) -> PolicySource:
    """Where ``spec.model.name`` = ``name`` is loaded from (module docstring); PolicyNotFound
    with the path or id, the cache looked in and how to allow downloads otherwise."""
    directory = Path(name).expanduser()
    if directory.is_dir():
        return PolicySource(str(directory), offline=True, where="directory")
    try:
        source = parse_model_uri(name, FIELD)
    except ModelUriError as e:
        raise PolicyNotFound(str(e)) from e
    if not source.is_hub:
        raise PolicyNotFound(
            f"{FIELD}={name!r}: no such directory; local runs load a directory of Hugging Face "
            "files, a Hub id (org/name) in the Hugging Face cache, or 'builtin:tiny-qwen'"
        )
    cache = hub_cache(env)
    snapshot = cached_snapshot(cache, source.hub_id)
    if snapshot is not None:
        return PolicySource(str(snapshot), offline=True, where="cache")
    if downloads_allowed(env):
        return PolicySource(source.hub_id, offline=False, where="download")
    raise PolicyNotFound(
        f"{FIELD}={name!r}: not a directory and not in the Hugging Face cache "
        f"({cache / ('models--' + source.hub_id.replace('/', '--'))}); local runs do not "
        f"download by default: set {ALLOW_DOWNLOADS}=1 to download it, or fetch it first with "
        f"`hf download {source.hub_id}`"
    )


__all__ = [
    "ALLOW_DOWNLOADS",
    "PolicyNotFound",
    "PolicySource",
    "cached_snapshot",
    "downloads_allowed",
    "hub_cache",
    "resolve_policy",
]
