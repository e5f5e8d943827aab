"""Study runs logged for real: one SQLite MLflow store for the session, and a helper that logs a
Study's parent run plus one nested run per arm x seed with plausible metrics, tagged exactly as
:meth:`sarl.spec.study.Study.runs` tags them (the local Study runner's tags)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sarl.spec.loader import validate_study
from sarl.spec.study import TAG_ROLE, TAG_STUDY, Study
from sarl.study.history import RunHistory
from sarl.tracking.tracker import Tracker

ARMS = ("sarl", "gt")  # document order; the reference is the second, so order is tested
REFERENCE = "gt"
SEEDS = (0, 1)
STEPS = 8  # training steps 1..8
EVAL_STEPS = (0, 4, 8)
K = 4
# (held-out avg@k change, SR change, length change) over the run, per arm
CHANGES = {"gt": (0.10, 0.02, -10.0), "sarl": (0.05, 0.20, 20.0)}

Metrics = Callable[[str, int, int], dict[str, float]]


def study_document(
    name: str,
    arms: Iterable[str] = ARMS,
    reference: str = REFERENCE,
    seeds: Iterable[int] = SEEDS,
) -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": name},
        "spec": {
            "base": {"preset": "local-grpo-arithmetic", "evaluation": {"k": K}},
            "arms": [{"name": arm} for arm in arms],
            "seeds": list(seeds),
            "reference": reference,
        },
    }


def plausible(arm: str, seed: int, step: int) -> dict[str, float]:
    """Training metrics at ``step`` (1..STEPS) and held-out metrics at the eval steps."""
    acc, sr, length = CHANGES[arm]
    t = step / STEPS
    out = {
        "reward/mean": 0.3 + 0.4 * t,
        "frac_reward_zero_std": 0.5 - 0.2 * t,
        "structure/score": 0.50 + 0.01 * seed + sr * t,
        "structure/clustering": 0.30 + 0.1 * t,
        "structure/path_length": 2.0 - 0.5 * t,
        "structure/degenerate": 0.1,
        "response_length": 100.0 + 5 * seed + length * t,
        "accuracy": 0.2 + 0.1 * t,
        "answer_rate": 0.9,
        "kl": 0.001 * step,
        "entropy": 1.0 - 0.05 * step,
    }
    if step == 0:
        out = {}  # training metrics start at step 1; step 0 is the evaluation before training
    if step in EVAL_STEPS:
        out |= {
            f"eval/heldout/avg_at_{K}": 0.20 + 0.01 * seed + acc * t,
            f"eval/heldout/pass_at_{K}": 0.40 + 0.01 * seed + acc * t,
            "eval/heldout/answer_rate": 0.95,
        }
    return out


def log_study(
    uri: str,
    study: Study,
    *,
    metrics: Metrics = plausible,
    store_document: bool = True,
    status: dict[tuple[str, int], str] | None = None,
    with_runs: bool = True,
) -> str:
    """Log ``study`` (parent run + every arm x seed) to ``uri``; returns the parent run id.

    ``status`` marks some arm x seed runs FAILED/KILLED instead of FINISHED; without
    ``with_runs`` only the parent run is logged.
    """
    parent = Tracker.start(
        uri,
        study.mlflow_experiment,
        study.name,
        tags={TAG_ROLE: "study", TAG_STUDY: study.name},
        spec_yaml="",  # spec/experiment.yaml: not a Study document
    )
    if store_document:
        parent.log_text(yaml.safe_dump(study.model_dump(mode="json")), "spec/study.yaml")
    for run in study.runs(parent.run_id) if with_runs else []:
        tracking = run.experiment.spec.tracking
        assert tracking.experiment_name is not None
        tracker = Tracker.start(
            uri, tracking.experiment_name, run.name, tags=tracking.tags, spec_yaml=""
        )
        for step in range(STEPS + 1):
            tracker.log_metrics(metrics(run.arm, run.seed, step), step=step)
        tracker.finish((status or {}).get((run.arm, run.seed), "FINISHED"))  # type: ignore[arg-type]
    parent.finish()
    return parent.run_id


def make_study(name: str | None = None, **kwargs: Any) -> Study:
    return validate_study(study_document(name or f"st-{uuid.uuid4().hex[:8]}", **kwargs))


def history(arm: str, seed: int, metrics: Metrics = plausible) -> RunHistory:
    """The :class:`RunHistory` that logging ``metrics`` would read back (no MLflow)."""
    points: dict[str, list[tuple[int, float]]] = {}
    for step in range(STEPS + 1):
        for key, value in metrics(arm, seed, step).items():
            points.setdefault(key, []).append((step, value))
    return RunHistory(arm, seed, f"{arm}-{seed}".ljust(32, "0"), "FINISHED", points)


@pytest.fixture(scope="session")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite MLflow store shared by the Study tests (creating one costs ~3 s)."""
    root: Path = tmp_path_factory.mktemp("study-mlflow")
    return f"sqlite:///{root / 'mlflow.db'}"


@pytest.fixture(scope="session")
def logged_study(store_uri: str) -> tuple[Study, str]:
    """The default Study (arms sarl and gt, seeds 0 and 1) logged once: (study, parent run id)."""
    study = make_study()
    return study, log_study(store_uri, study)


def _stub_plot(histories: object, arms: object, out_path: Path, **_: object) -> Path:
    out_path.write_bytes(b"\x89PNG\r\n\x1a\n")
    return out_path


@pytest.fixture
def no_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the curves plot by a stub: drawing costs ~1 s, and tests using this are about the
    rest of the report (test_plot and the end-to-end test draw for real)."""
    monkeypatch.setattr("sarl.study.plot.plot_curves", _stub_plot)
