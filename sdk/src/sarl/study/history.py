"""A Study's runs read back from MLflow, and each run summarized into start and end values.

Called by :mod:`sarl.study.report` (``report_for``) for ``sarl study report`` and for the local
Study runner at the end of a Study. A Study is one MLflow *parent run* (tags ``sarl.role=study``,
``sarl.study=<name>``) with one nested run per arm x seed (tags ``mlflow.parentRunId``, ``arm``,
``seed``; see :mod:`sarl.spec.study`). :func:`find_parent_run` turns a Study name or run id into
the parent run's id, :func:`load_study_runs` reads the nested runs' metric histories (with
:func:`sarl.tracking.history.metric_histories`, as ``sarl compare`` does), and
:func:`summarize_run` (pure) turns one history into the numbers the report compares;
:func:`validity_rewards` names the rewards whose validity it logged (``validity/<reward>/...``);
:mod:`sarl.study.validity_summary` summarizes those.

Which runs count: only ``FINISHED`` ones (a failed or still running run would bias its arm); when
one arm x seed has several ``FINISHED`` runs (the Study was re-run under the same parent), the
newest wins. Every run left out is named in :attr:`StudyParent.skipped`.

Store access goes through :mod:`sarl.tracking.store` (``make_client``, ``guarded``, bounded HTTP
retries), so every failure is a one-line :class:`~sarl.tracking.store.TrackingError`.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sarl.evaluation.benchmark import MEAN_BENCHMARK
from sarl.evaluation.validity import COUNTS_PREFIX
from sarl.progress import mlflow_bars_off
from sarl.spec.study import TAG_ARM, TAG_PARENT, TAG_ROLE, TAG_SEED, TAG_STUDY, is_study_document
from sarl.tracking.history import Points, metric_histories
from sarl.tracking.lookup import (
    RUN_ID,
    get_run,
    known_names,
    newest_run_named,
    newest_study_parent,
    study_runs,
)
from sarl.tracking.metrics import (
    ACCURACY,
    ANSWER_RATE,
    ENTROPY,
    EVAL_PREFIX,
    FRAC_REWARD_ZERO_STD,
    KL,
    RESPONSE_LENGTH,
    REWARD_MEAN,
    REWARD_PREFIX,
    STRUCTURE_CLUSTERING,
    STRUCTURE_DEGENERATE,
    STRUCTURE_PATH_LENGTH,
    STRUCTURE_SCORE,
    VALIDITY_PREFIX,
    eval_avg_at,
    eval_pass_at,
    metric_key,
)
from sarl.tracking.store import (
    TrackingError,
    bound_http_retries,
    guarded,
    make_client,
    preflight,
    sqlite_path,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

#: The benchmark the local runner evaluates on (the task's held-out split). Cluster runs evaluate
#: on named benchmarks and log their mean as ``MEAN_BENCHMARK`` (see :func:`infer_benchmark`).
HELDOUT = "heldout"
#: Where the Study document may sit in the parent run's artifacts, in the order they are tried.
STUDY_SPEC_ARTIFACTS = ("spec/study.yaml", "spec/experiment.yaml")
#: Training metrics a run summary reports, by summary name: mean of the first and the last
#: quarter of the logged steps (``<name>_start``, ``<name>_end``).
TRAINING_METRICS: Mapping[str, str] = {
    "sr": STRUCTURE_SCORE,
    "clustering": STRUCTURE_CLUSTERING,
    "path_length": STRUCTURE_PATH_LENGTH,
    "length": RESPONSE_LENGTH,
    "kl": KL,
    "entropy": ENTROPY,
    "accuracy": ACCURACY,  # on the training batch
    "answer_rate": ANSWER_RATE,  # training responses with a final answer
    "degenerate": STRUCTURE_DEGENERATE,  # responses whose reasoning map has < 2 nodes
}
#: Held-out metrics, by summary name: value at the first and the last evaluation step.
EVAL_METRICS: tuple[str, ...] = ("eval_accuracy", "eval_pass", "eval_answer_rate")
#: Every metric a run summary has a start and an end of (the report compares each per arm, as
#: ``<name>_start``, ``<name>_end`` and ``<name>_change``).
COMPARED: tuple[str, ...] = (*EVAL_METRICS, *TRAINING_METRICS)
#: Training metrics read from MLflow beyond :data:`TRAINING_METRICS` (plots, tables); every
#: ``eval/...``, ``reward/...``, ``validity/...`` and ``validity_counts/...`` metric is read too.
EXTRA_METRICS: tuple[str, ...] = (REWARD_MEAN, FRAC_REWARD_ZERO_STD)

# Study names are DNS-1123 labels; anything outside this cannot be one and is refused before it
# reaches a filter string.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_AVG_AT = re.compile(r"^" + re.escape(EVAL_PREFIX) + r"(.+)/avg_at_(\d+)$")
_VALIDITY = re.compile(r"^" + re.escape(VALIDITY_PREFIX) + r"(.+)/(?:auroc|pair_agreement)$")


def eval_metric(name: str, k: int, benchmark: str = HELDOUT) -> str:
    """The MLflow key of evaluation metric ``name`` (one of :data:`EVAL_METRICS`)."""
    if name == "eval_accuracy":
        return eval_avg_at(benchmark, k)
    if name == "eval_pass":
        return eval_pass_at(benchmark, k)
    if name == "eval_answer_rate":
        # spelled like sarl.evaluation.benchmark and sarl.runner.session log it
        return f"{EVAL_PREFIX}{metric_key(benchmark)}/answer_rate"
    raise ValueError(f"unknown held-out metric {name!r}; one of {', '.join(EVAL_METRICS)}")


#: Every key of a :func:`summarize_run` dict, in table order.
RUN_KEYS: tuple[str, ...] = (
    "mlflow_run_id",
    "steps",
    "eval_step_start",
    "eval_step_end",
    *(f"{name}_{end}" for name in COMPARED for end in ("start", "end")),
)


@dataclass(frozen=True)
class RunHistory:
    """One arm x seed run: its metric histories as ``(step, value)`` sorted by step, non-finite
    values dropped, a step logged twice (a resumed run) keeping its latest value."""

    arm: str
    seed: int
    run_id: str
    status: str
    metrics: dict[str, Points] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyParent:
    """The Study's parent run. ``document``: the Study document found in its artifacts (raw,
    not validated), if any; ``skipped``: one line per nested run left out, and why."""

    run_id: str
    study: str | None
    experiment_id: str
    status: str
    start_time: int | None
    document: dict[str, Any] | None = None
    skipped: tuple[str, ...] = ()


# -- reading MLflow --------------------------------------------------------------------------------


def open_store(uri: str) -> MlflowClient:
    """A client for ``uri`` after a preflight; a missing SQLite store is an error, not created."""
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        raise TrackingError(f"no MLflow store at {db}: no runs have been logged there")
    preflight(uri)
    bound_http_retries()
    return make_client(uri)


def find_parent_run(tracking_uri: str, study_name_or_run_id: str) -> str:
    """The id of a Study's parent run, given that id or the Study's name (its newest parent run).

    Raises :class:`TrackingError` when no such run exists (naming the experiments, Studies and
    runs the store does hold) or a run id names a run that is not a Study's parent run,
    ``ValueError`` when the value can be neither.
    """
    value = study_name_or_run_id.strip()
    client = open_store(tracking_uri)
    if RUN_ID.match(value):
        run = get_run(client, tracking_uri, value)
        if run is not None:
            role, parent = run.data.tags.get(TAG_ROLE), run.data.tags.get(TAG_PARENT)
            if role != "study":
                hint = f"; its parent run is {parent}" if parent else ""
                raise TrackingError(
                    f"run {value} at {tracking_uri} is not a Study's parent run "
                    f"({TAG_ROLE}={role!r}, expected 'study'){hint}"
                )
            return value
    if not _NAME.match(value):
        raise ValueError(f"{value!r} is neither an MLflow run id nor a Study name")
    found = newest_study_parent(client, tracking_uri, value)
    if found is None:
        nor_id = " (nor run with that id)" if RUN_ID.match(value) else ""
        raise TrackingError(
            f"no Study named {value!r}{nor_id} at {tracking_uri}"
            f"{_run_of_study(client, tracking_uri, value)}; {known_names(client, tracking_uri)}"
        )
    return str(found.info.run_id)


def _run_of_study(client: MlflowClient, uri: str, name: str) -> str:
    """``: 'x' is a run of Study 's' (report it by that name)`` when ``name`` is an arm x seed
    run's name (the mistake of passing ``local-demo-structure-s0`` for ``local-demo``)."""
    run = newest_run_named(client, uri, name)
    study = None if run is None else run.data.tags.get(TAG_STUDY)
    return f": {name!r} is a run of Study {study!r} (report that name)" if study else ""


def load_study_runs(tracking_uri: str, parent_run_id: str) -> tuple[StudyParent, list[RunHistory]]:
    """The parent run and its nested ``FINISHED`` runs (newest per arm x seed), sorted by arm
    then seed, each with the histories of the metrics the report uses."""
    client = open_store(tracking_uri)
    parent = get_run(client, tracking_uri, parent_run_id)
    if parent is None:
        raise TrackingError(f"no run {parent_run_id!r} at {tracking_uri}")
    kept, skipped = _select(study_runs(client, tracking_uri, parent))
    histories = [
        RunHistory(arm, seed, r.info.run_id, r.info.status, _histories(client, tracking_uri, r))
        for (arm, seed), r in sorted(kept.items())
    ]
    info = StudyParent(
        run_id=parent_run_id,
        study=parent.data.tags.get(TAG_STUDY),
        experiment_id=parent.info.experiment_id,
        status=parent.info.status,
        start_time=parent.info.start_time,
        document=_study_document(client, tracking_uri, parent_run_id),
        skipped=tuple(skipped),
    )
    return info, histories


def _select(runs: Iterable[Run]) -> tuple[dict[tuple[str, int], Run], list[str]]:
    """The newest FINISHED run per (arm, seed), and a line for each run left out."""
    kept: dict[tuple[str, int], Run] = {}
    skipped: list[str] = []
    for run in runs:
        tags = run.data.tags
        arm, seed_text, run_id = tags.get(TAG_ARM), tags.get(TAG_SEED, ""), run.info.run_id
        if not arm or not seed_text.isdigit():
            skipped.append(f"run {run_id}: no '{TAG_ARM}'/'{TAG_SEED}' tags")
            continue
        seed = int(seed_text)
        if run.info.status != "FINISHED":
            skipped.append(f"run {run_id} (arm {arm}, seed {seed}): {run.info.status}")
            continue
        previous = kept.get((arm, seed))
        if previous is not None:
            older, run = sorted((previous, run), key=lambda r: r.info.start_time or 0)
            skipped.append(
                f"run {older.info.run_id} (arm {arm}, seed {seed}): superseded by the newer "
                f"run {run.info.run_id}"
            )
        kept[(arm, seed)] = run
    return kept, skipped


def _wanted(key: str) -> bool:
    return (
        key.startswith((EVAL_PREFIX, REWARD_PREFIX, VALIDITY_PREFIX, COUNTS_PREFIX))
        or key in TRAINING_METRICS.values()
        or key in EXTRA_METRICS
    )


def _histories(client: MlflowClient, uri: str, run: Run) -> dict[str, Points]:
    return metric_histories(client, uri, run, sorted(k for k in run.data.metrics if _wanted(k)))


def _study_document(client: MlflowClient, uri: str, run_id: str) -> dict[str, Any] | None:
    """The Study document stored with the parent run (see :data:`STUDY_SPEC_ARTIFACTS`)."""
    import yaml

    listed = guarded(
        uri, f"listing artifacts of run {run_id}", partial(client.list_artifacts, run_id, "spec")
    )
    present = {f.path for f in listed}
    for path in STUDY_SPEC_ARTIFACTS:
        if path not in present:
            continue
        with tempfile.TemporaryDirectory() as tmp, mlflow_bars_off():
            local = guarded(
                uri,
                f"downloading {path} of run {run_id}",
                partial(client.download_artifacts, run_id, path, tmp),
            )
            try:
                data = yaml.safe_load(Path(local).read_text(encoding="utf-8"))
            except yaml.YAMLError:
                continue
        if is_study_document(data):
            return dict(data)
    return None


# -- one run in numbers ----------------------------------------------------------------------------


def _avg_at_keys(history: RunHistory) -> Iterator[tuple[str, int]]:
    """(benchmark, k) of every ``eval/<benchmark>/avg_at_<k>`` the run logged."""
    for key in history.metrics:
        if m := _AVG_AT.match(key):
            yield m.group(1), int(m.group(2))


def logged_ks(history: RunHistory, benchmark: str = HELDOUT) -> set[int]:
    """The ``k`` of every ``eval/<benchmark>/avg_at_<k>`` the run logged."""
    name = metric_key(benchmark)
    return {k for b, k in _avg_at_keys(history) if b == name}


def infer_k(histories: Sequence[RunHistory], default: int, benchmark: str = HELDOUT) -> int:
    """The ``k`` most runs logged avg@k of ``benchmark`` for (ties: the smallest), else
    ``default``."""
    counts = Counter(k for h in histories for k in logged_ks(h, benchmark))
    if not counts:
        return default
    top = max(counts.values())
    return min(k for k, c in counts.items() if c == top)


def infer_benchmark(histories: Sequence[RunHistory]) -> str:
    """The benchmark the report compares on: :data:`HELDOUT` when any run logged avg@k on it
    (local runs), else ``MEAN_BENCHMARK`` (cluster runs on several benchmarks), else the one
    most runs logged (ties: alphabetical), else :data:`HELDOUT`."""
    counts = Counter(b for h in histories for b in {b for b, _ in _avg_at_keys(h)})
    for preferred in (HELDOUT, MEAN_BENCHMARK):
        if counts[preferred]:
            return preferred
    if not counts:
        return HELDOUT
    top = max(counts.values())
    return min(b for b, c in counts.items() if c == top)


def quarter_means(points: Sequence[tuple[int, float]]) -> tuple[float | None, float | None]:
    """Means of the first and the last quarter of ``points`` (sorted by step).

    A quarter is ``max(1, ceil(n/4))`` points, so the two never overlap from two points on; one
    point is both quarters; no point → ``(None, None)``.
    """
    if not points:
        return None, None
    q = max(1, math.ceil(len(points) / 4))
    first = [v for _, v in points[:q]]
    last = [v for _, v in points[-q:]]
    return sum(first) / len(first), sum(last) / len(last)


def summarize_run(history: RunHistory, k: int, *, benchmark: str = HELDOUT) -> dict[str, Any]:
    """One run's start and end values, keys :data:`RUN_KEYS`.

    Held-out ``eval_*`` metrics (avg@k, pass@k, answer rate on ``benchmark``): the value at the
    first evaluation step (``_start``; step 0, the policy before any RL update, when the runner
    evaluated there) and at the last one (``_end``); a run evaluated at one step only has a start
    and no end. Training metrics (:data:`TRAINING_METRICS`): means over the first
    and the last quarter of the steps the metric was logged at (:func:`quarter_means`).
    ``steps``: the last training step logged. A metric the run did not log is ``None`` (never 0),
    so it drops out of the means over seeds instead of dragging them down.
    """
    out: dict[str, Any] = dict.fromkeys(RUN_KEYS)
    out["mlflow_run_id"] = history.run_id
    training_steps = [
        points[-1][0] for key in TRAINING_METRICS.values() if (points := history.metrics.get(key))
    ]
    out["steps"] = max(training_steps, default=None)
    for name in EVAL_METRICS:
        points = history.metrics.get(eval_metric(name, k, benchmark), [])
        if not points:
            continue
        out[f"{name}_start"] = points[0][1]
        if len(points) > 1:
            out[f"{name}_end"] = points[-1][1]
        if name == "eval_accuracy":
            out["eval_step_start"] = points[0][0]
            out["eval_step_end"] = points[-1][0] if len(points) > 1 else None
    for name, key in TRAINING_METRICS.items():
        out[f"{name}_start"], out[f"{name}_end"] = quarter_means(history.metrics.get(key, []))
    return out


def validity_rewards(history: RunHistory) -> list[str]:
    """The rewards (as their metric keys name them) whose AUROC or pair agreement the run
    logged (``validity/<reward>/...``, :func:`sarl.tracking.metrics.validity_metric`), sorted."""
    return sorted({m.group(1) for key in history.metrics if (m := _VALIDITY.match(key))})


__all__ = [
    "COMPARED",
    "EVAL_METRICS",
    "HELDOUT",
    "RUN_KEYS",
    "STUDY_SPEC_ARTIFACTS",
    "TRAINING_METRICS",
    "RunHistory",
    "StudyParent",
    "eval_metric",
    "find_parent_run",
    "infer_benchmark",
    "infer_k",
    "load_study_runs",
    "logged_ks",
    "open_store",
    "quarter_means",
    "summarize_run",
    "validity_rewards",
]
