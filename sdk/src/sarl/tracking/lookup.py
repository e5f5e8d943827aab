"""Find MLflow runs by what people call them, and say what a store holds when a name is unknown.

Called by :mod:`sarl.tracking.compare` (``sarl compare``, ``sarl.compare``) and
:mod:`sarl.study.history` (``sarl study report``). People name a run by its id, by its name
(``local-demo-structure-s0``), or a whole Study by its name or its parent run. A Study is one
parent run (tags ``sarl.role=study``, ``sarl.study=<name>``) with one nested run per arm x seed
(``mlflow.parentRunId``, ``arm``, ``seed``; :mod:`sarl.spec.study`); the parent logs no training
metrics, so where runs are compared a Study stands for its arm x seed runs
(:func:`expand_study`). When a name matches nothing, :func:`known_names` lists the experiments,
Studies and runs the store does hold, so the error shows what to type instead.

Every MLflow call goes through :func:`~sarl.tracking.store.guarded`: failures are one-line
:class:`~sarl.tracking.store.TrackingError` s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Final

from sarl.spec.study import TAG_PARENT, TAG_ROLE, TAG_STUDY
from sarl.tracking.store import TrackingError, error_code, guarded, one_line

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Experiment, Run

RUN_ID: Final = re.compile(r"^[0-9a-f]{32}$")
# search_runs takes a bounded number of experiments per call; 100 stays under every store's limit.
_EXPERIMENTS_PER_SEARCH: Final = 100
#: Names listed per kind in :func:`known_names` (the newest first), then how many more there are.
SHOWN: Final = 8
# How many of the newest runs known_names reads (an error message, not an inventory).
_SCANNED: Final = 500


def searchable(name: str) -> bool:
    """Whether ``name`` can go into an MLflow filter string as a quoted literal: MLflow's filter
    grammar has no escape for a quote, so a name holding one cannot be searched for (and must not
    reach the filter, where it would change the query)."""
    return bool(name) and not any(c in name for c in "'\"\\`") and name.isprintable()


def get_run(client: MlflowClient, uri: str, run_id: str) -> Run | None:
    """The run ``run_id``, or ``None`` when the store has no such run."""
    try:
        return client.get_run(run_id)
    except Exception as e:
        if error_code(e) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise TrackingError(
            f"tracking: reading run {run_id!r} at {uri} failed: {one_line(e)}"
        ) from e


def active_experiments(client: MlflowClient, uri: str) -> list[Experiment]:
    """Every active experiment of the store (every page)."""
    experiments: list[Experiment] = []
    token: str | None = None
    while True:
        page = guarded(
            uri, "listing experiments", partial(client.search_experiments, page_token=token)
        )
        experiments.extend(page)
        token = page.token
        if not token:
            return experiments


def search_runs(
    client: MlflowClient,
    uri: str,
    experiment_ids: Sequence[str],
    query: str = "",
    *,
    newest_first: bool = False,
    limit: int | None = None,
) -> list[Run]:
    """Active runs of ``experiment_ids`` matching ``query``, by start time (oldest first unless
    ``newest_first``), every page; at most ``limit`` per batch of experiments."""
    order = ["attributes.start_time " + ("DESC" if newest_first else "ASC")]
    runs: list[Run] = []
    for start in range(0, len(experiment_ids), _EXPERIMENTS_PER_SEARCH):
        batch = list(experiment_ids[start : start + _EXPERIMENTS_PER_SEARCH])
        found: list[Run] = []
        token: str | None = None
        while limit is None or len(found) < limit:
            page = guarded(
                uri,
                "searching runs",
                partial(
                    client.search_runs,
                    batch,
                    filter_string=query,
                    order_by=order,
                    page_token=token,
                    **({} if limit is None else {"max_results": limit}),
                ),
            )
            found.extend(page)
            token = page.token
            if not token:
                break
        runs.extend(found if limit is None else found[:limit])
    runs.sort(key=lambda r: r.info.start_time or 0, reverse=newest_first)
    return runs


def is_study_parent(run: Run) -> bool:
    """Whether ``run`` is a Study's parent run (it groups the arm x seed runs, logs no curves)."""
    return run.data.tags.get(TAG_ROLE) == "study"


def newest_study_parent(client: MlflowClient, uri: str, study: str) -> Run | None:
    """The newest parent run of the Study named ``study``, in any active experiment."""
    if not searchable(study):
        return None
    ids = [e.experiment_id for e in active_experiments(client, uri)]
    query = f"tags.`{TAG_ROLE}` = 'study' and tags.`{TAG_STUDY}` = '{study}'"
    found = search_runs(client, uri, ids, query, newest_first=True, limit=1)
    return found[0] if found else None


def newest_run_named(client: MlflowClient, uri: str, name: str) -> Run | None:
    """The newest run named ``name`` (MLflow's run name), in any active experiment."""
    if not searchable(name):
        return None
    ids = [e.experiment_id for e in active_experiments(client, uri)]
    found = search_runs(
        client, uri, ids, f"attributes.run_name = '{name}'", newest_first=True, limit=1
    )
    return found[0] if found else None


def study_runs(client: MlflowClient, uri: str, parent: Run) -> list[Run]:
    """The arm x seed runs nested under the Study parent run ``parent``, oldest first."""
    query = f"tags.`{TAG_PARENT}` = '{parent.info.run_id}'"
    return search_runs(client, uri, [parent.info.experiment_id], query)


def expand_study(client: MlflowClient, uri: str, run: Run) -> list[Run]:
    """``run`` itself, or for a Study's parent run the Study's arm x seed runs."""
    return study_runs(client, uri, run) if is_study_parent(run) else [run]


def find_runs(client: MlflowClient, uri: str, value: str) -> list[Run] | None:
    """The runs ``value`` names, tried in this order: a run id; a Study's name (the arm x seed
    runs of its newest parent run); a run's name (its newest run). A Study's parent run, however
    named, stands for its arm x seed runs. ``None`` when ``value`` names nothing."""
    value = value.strip()
    if RUN_ID.match(value) and (run := get_run(client, uri, value)) is not None:
        return expand_study(client, uri, run)
    if (parent := newest_study_parent(client, uri, value)) is not None:
        return study_runs(client, uri, parent)
    if (run := newest_run_named(client, uri, value)) is not None:
        return expand_study(client, uri, run)
    return None


def known_names(client: MlflowClient, uri: str) -> str:
    """``known experiments: …; Studies: …; runs: …`` of the store, newest first, at most
    :data:`SHOWN` a kind (then how many more among the newest runs read), for an error about a
    name that matched nothing."""
    experiments = active_experiments(client, uri)
    recent = search_runs(
        client, uri, [e.experiment_id for e in experiments], newest_first=True, limit=_SCANNED
    )
    recent.sort(key=lambda r: r.info.start_time or 0, reverse=True)
    studies = [r.data.tags.get(TAG_STUDY, "") for r in recent if is_study_parent(r)]
    runs = [r.info.run_name or "" for r in recent if not is_study_parent(r)]
    # The empty Default experiment MLflow creates is no answer to "what is there".
    names = [e.name for e in experiments if not (e.name == "Default" and e.experiment_id == "0")]
    if not names and not runs and not studies:
        return "the store holds no experiments"
    parts = [
        f"{kind}: {_listed(values)}"
        for kind, values in (("experiments", names), ("Studies", studies), ("runs", runs))
        if any(values)
    ]
    return "known " + "; ".join(parts)


def _listed(values: Sequence[str]) -> str:
    unique = list(dict.fromkeys(v for v in values if v))
    shown = ", ".join(unique[:SHOWN])
    more = len(unique) - SHOWN
    return shown + (f" (+{more} more)" if more > 0 else "")


__all__ = [
    "RUN_ID",
    "SHOWN",
    "active_experiments",
    "expand_study",
    "find_runs",
    "get_run",
    "is_study_parent",
    "known_names",
    "newest_run_named",
    "newest_study_parent",
    "search_runs",
    "searchable",
    "study_runs",
]
