"""Metric histories read back from MLflow: one ``(step, value)`` curve per metric of a run.

The one reader of MLflow metric histories for reports and comparisons. Called by
:mod:`sarl.tracking.compare` (the curves of ``sarl compare``) and :mod:`sarl.study.history` (the
arm x seed runs a Study report summarizes). A step logged more than once (a resumed run that
logged it again) keeps its latest value, by timestamp; values the caller's ``keep`` refuses
(``NaN`` at least) are dropped. Reads go through :func:`sarl.tracking.store.guarded`, so a
failure is one :class:`~sarl.tracking.store.TrackingError` line naming the metric and run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

from sarl.tracking.store import guarded

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

#: One metric's curve: ``(step, value)`` sorted by step, each step once.
Points = list[tuple[int, float]]


def metric_histories(
    client: MlflowClient,
    uri: str,
    run: Run,
    keys: Iterable[str],
    *,
    keep: Callable[[float], bool] = math.isfinite,
) -> dict[str, Points]:
    """The curves of ``keys`` in ``run`` (in that order), each the last value per step.

    ``keep`` decides which values count (default: finite ones); of the points logged at one
    step, the one with the latest timestamp wins (a tie: the one MLflow listed last).
    """
    out: dict[str, Points] = {}
    for key in keys:
        history = guarded(
            uri,
            f"reading {key} of run {run.info.run_id}",
            partial(client.get_metric_history, run.info.run_id, key),
        )
        latest: dict[int, tuple[int, float]] = {}  # step -> (timestamp, value)
        for m in history:
            if keep(m.value) and m.timestamp >= latest.get(m.step, (-1, 0.0))[0]:
                latest[m.step] = (m.timestamp, m.value)
        out[key] = [(step, latest[step][1]) for step in sorted(latest)]
    return out


__all__ = ["Points", "metric_histories"]
