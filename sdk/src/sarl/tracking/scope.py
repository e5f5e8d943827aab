"""Which tenant's MLflow experiments a reader means: ``sarl compare`` scoped to a namespace.

On a platform with tenants (issue 36) a run of namespace ``ns`` is in the MLflow experiment
``ns/<name>`` (:func:`sarl.cluster.tenancy.mlflow_experiment_name`). ``sarl compare`` reads the
caller's namespace's experiments by default: :func:`default_namespace` picks it (``--namespace``,
else the kubeconfig context's namespace when the tracking server is a remote one; none with
``--all-namespaces`` or a local store), :func:`in_namespace` keeps its runs. Called by
:mod:`sarl.tracking.compare` and :mod:`sarl.cli.compare`. Pure apart from reading the
kubeconfig file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sarl.cluster.tenancy import mlflow_experiment_name
from sarl.tracking.store import TrackingError

R = TypeVar("R")


def context_namespace(env: Mapping[str, str]) -> str:
    """The namespace of the kubeconfig's current context (``KUBECONFIG``, else
    ``~/.kube/config``; the first file naming a current context); "" when there is none."""
    source = env.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    for path in (Path(p).expanduser() for p in source.split(os.pathsep) if p):
        try:
            doc: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        current = doc.get("current-context") if isinstance(doc, dict) else None
        if not current:
            continue
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == current:
                return str((entry.get("context") or {}).get("namespace") or "")
        return ""
    return ""


def default_namespace(
    namespace: str | None, all_namespaces: bool, tracking_uri: str, env: Mapping[str, str]
) -> str:
    """The namespace ``sarl compare`` reads: none with ``all_namespaces``; ``namespace`` when
    given; for a remote tracking server (http/https: a platform's) the kubeconfig context's;
    else none (a local store has no tenants)."""
    if all_namespaces:
        return ""
    if namespace:
        return namespace
    if tracking_uri.startswith(("http://", "https://")):
        return context_namespace(env)
    return ""


def in_namespace(
    runs: Sequence[R], experiment_names: Sequence[str], namespace: str, uri: str
) -> list[R]:
    """The ``runs`` whose experiment (``experiment_names``, one per run) is ``namespace``'s
    (``<ns>/...``); TrackingError saying how to look elsewhere when none is."""
    prefix = mlflow_experiment_name(namespace, "")
    kept = [r for r, name in zip(runs, experiment_names, strict=True) if name.startswith(prefix)]
    if not kept:
        raise TrackingError(
            f"no runs of namespace {namespace} (experiments {prefix}...) to compare at {uri}; "
            "--namespace NS compares another namespace's, --all-namespaces every one you may read"
        )
    return kept
