"""Reading a Study's runs back from a real MLflow store, and one run summarized."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sarl.spec.study import TAG_ARM, TAG_SEED, Study
from sarl.study.history import (
    RUN_KEYS,
    RunHistory,
    find_parent_run,
    infer_benchmark,
    infer_k,
    load_study_runs,
    quarter_means,
    summarize_run,
)
from sarl.tracking.tracker import Tracker, TrackingError
from tests.sarl.study.conftest import ARMS, SEEDS, STEPS, K, history, log_study, make_study

# -- summarize_run (pure) --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], (None, None)),
        ([5.0], (5.0, 5.0)),  # one point is both quarters
        ([1.0, 3.0], (1.0, 3.0)),
        ([1.0, 2.0, 3.0, 4.0], (1.0, 4.0)),  # ceil(4/4) = 1 point per quarter
        ([1.0, 2.0, 3.0, 4.0, 5.0], (1.5, 4.5)),  # ceil(5/4) = 2
        ([float(v) for v in range(1, 9)], (1.5, 7.5)),  # 8 steps: 2 per quarter
    ],
)
def test_quarter_means(values: list[float], expected: tuple[float | None, float | None]) -> None:
    assert quarter_means(list(enumerate(values))) == expected


def test_summary_of_one_run() -> None:
    run = history("sarl", 1)
    summary = summarize_run(run, K)
    assert tuple(summary) == RUN_KEYS
    assert summary["mlflow_run_id"] == run.run_id
    assert summary["steps"] == STEPS
    # held-out: step 0 (before any update) -> last eval step
    assert (summary["eval_step_start"], summary["eval_step_end"]) == (0, STEPS)
    assert summary["eval_accuracy_start"] == pytest.approx(0.21)
    assert summary["eval_accuracy_end"] == pytest.approx(0.26)
    assert summary["eval_pass_end"] == pytest.approx(0.46)
    assert summary["eval_answer_rate_start"] == pytest.approx(0.95)
    # training: steps 1-2 and 7-8 (SR = 0.51 + 0.2 * step / 8)
    assert summary["sr_start"] == pytest.approx(0.51 + 0.2 * 1.5 / 8)
    assert summary["sr_end"] == pytest.approx(0.51 + 0.2 * 7.5 / 8)
    assert summary["length_end"] == pytest.approx(105 + 20 * 7.5 / 8)
    assert summary["kl_start"] == pytest.approx(0.0015)
    assert summary["degenerate_end"] == pytest.approx(0.1)


def test_missing_metrics_are_none_not_zero() -> None:
    run = history("gt", 0)
    trimmed = {k: v for k, v in run.metrics.items() if k not in ("kl", "structure/score")}
    summary = summarize_run(dataclasses.replace(run, metrics=trimmed), K)
    assert summary["kl_start"] is None and summary["kl_end"] is None
    assert summary["sr_start"] is None and summary["sr_end"] is None
    assert summary["length_start"] is not None
    # k that was never logged: no held-out values at all
    other_k = summarize_run(run, K + 1)
    assert other_k["eval_accuracy_start"] is None and other_k["eval_step_start"] is None


def test_one_evaluation_gives_a_start_and_no_end() -> None:
    run = RunHistory("gt", 0, "r" * 32, "FINISHED", {f"eval/heldout/avg_at_{K}": [(0, 0.3)]})
    summary = summarize_run(run, K)
    assert summary["eval_accuracy_start"] == 0.3
    assert summary["eval_accuracy_end"] is None and summary["eval_step_end"] is None
    assert summary["steps"] is None


def test_infer_k_takes_the_k_most_runs_logged() -> None:
    def evals(*ks: int) -> RunHistory:
        return RunHistory("a", 0, "r", "FINISHED", {f"eval/heldout/avg_at_{k}": [] for k in ks})

    assert infer_k([evals(4), evals(4, 8), evals(8), evals(8)], default=1) == 8
    assert infer_k([evals(4), evals(8)], default=1) == 4  # tie: the smallest
    assert infer_k([history("gt", 0)], default=1) == K
    assert infer_k([RunHistory("a", 0, "r", "FINISHED")], default=3) == 3


def test_infer_benchmark_prefers_heldout_then_the_mean() -> None:
    def evals(*benchmarks: str) -> RunHistory:
        keys: dict[str, list[tuple[int, float]]] = {f"eval/{b}/avg_at_8": [] for b in benchmarks}
        return RunHistory("a", 0, "r", "FINISHED", keys)

    assert infer_benchmark([evals("math500", "mean"), evals("heldout")]) == "heldout"
    assert infer_benchmark([evals("math500", "aime25", "mean")] * 2) == "mean"
    assert infer_benchmark([evals("math500"), evals("aime25", "math500")]) == "math500"
    assert infer_benchmark([RunHistory("a", 0, "r", "FINISHED")]) == "heldout"


def test_summary_on_another_benchmark() -> None:
    metrics = {"eval/mean/avg_at_8": [(0, 0.1), (50, 0.4)], "eval/heldout/avg_at_8": [(0, 0.9)]}
    run = RunHistory("a", 0, "r", "FINISHED", metrics)
    summary = summarize_run(run, 8, benchmark="mean")
    assert (summary["eval_accuracy_start"], summary["eval_accuracy_end"]) == (0.1, 0.4)
    assert infer_k([run], default=1, benchmark="mean") == 8


# -- reading MLflow --------------------------------------------------------------------------------


def test_load_study_runs(store_uri: str, logged_study: tuple[Study, str]) -> None:
    study, parent_id = logged_study
    parent, runs = load_study_runs(store_uri, parent_id)
    assert parent.run_id == parent_id and parent.study == study.name
    assert parent.status == "FINISHED" and parent.skipped == ()
    assert parent.document is not None and parent.document["metadata"]["name"] == study.name
    assert [(r.arm, r.seed) for r in runs] == sorted((a, s) for a in ARMS for s in SEEDS)
    assert {r.status for r in runs} == {"FINISHED"}
    for run in runs:
        assert [step for step, _ in run.metrics["structure/score"]] == list(range(1, STEPS + 1))
        assert [step for step, _ in run.metrics[f"eval/heldout/avg_at_{K}"]] == [0, 4, 8]
        assert "reward/mean" in run.metrics and "frac_reward_zero_std" in run.metrics
        expected = history(run.arm, run.seed).metrics
        assert run.metrics["response_length"] == expected["response_length"]


def test_only_finished_runs_count_and_the_newest_wins(store_uri: str) -> None:
    study = make_study()
    parent_id = log_study(store_uri, study, status={("sarl", 1): "FAILED"})
    # gt seed 0 run again under the same parent, finishing with other numbers
    rerun = next(r for r in study.runs(parent_id) if (r.arm, r.seed) == ("gt", 0))
    tracking = rerun.experiment.spec.tracking
    assert tracking.experiment_name is not None
    with Tracker.start(
        store_uri, tracking.experiment_name, rerun.name, tags=tracking.tags, spec_yaml=""
    ) as tracker:
        tracker.log_metrics({"structure/score": 0.9}, step=1)
    # a nested run without arm/seed tags is left out too
    with Tracker.start(
        store_uri,
        tracking.experiment_name,
        "stray",
        tags={k: v for k, v in tracking.tags.items() if k not in (TAG_ARM, TAG_SEED)},
        spec_yaml="",
    ) as stray:
        pass

    parent, runs = load_study_runs(store_uri, parent_id)
    assert [(r.arm, r.seed) for r in runs] == [("gt", 0), ("gt", 1), ("sarl", 0)]
    assert runs[0].run_id == tracker.run_id
    assert runs[0].metrics["structure/score"] == [(1, 0.9)]
    assert len(parent.skipped) == 3
    assert any("(arm sarl, seed 1): FAILED" in line for line in parent.skipped)
    assert any(f"superseded by the newer run {tracker.run_id}" in line for line in parent.skipped)
    assert any(stray.run_id in line and "no 'arm'/'seed' tags" in line for line in parent.skipped)


def test_find_parent_run_by_name_or_id(store_uri: str) -> None:
    study = make_study()
    older = log_study(store_uri, study, with_runs=False)
    newer = log_study(store_uri, study, with_runs=False)
    assert find_parent_run(store_uri, study.name) == newer
    assert find_parent_run(store_uri, older) == older
    assert find_parent_run(store_uri, f" {newer} ") == newer


def test_find_parent_run_errors_name_the_value(
    store_uri: str, logged_study: tuple[Study, str], tmp_path: Path
) -> None:
    study, parent_id = logged_study
    with pytest.raises(TrackingError) as unknown:
        find_parent_run(store_uri, "no-such-study")
    message = str(unknown.value)
    assert message.startswith(f"no Study named 'no-such-study' at {store_uri}; known ")
    assert "; Studies: st-" in message  # what could be typed instead (the store's Studies)
    assert "\n" not in message
    with pytest.raises(TrackingError, match=f"no Study named '{'f' * 32}' \\(nor run with that"):
        find_parent_run(store_uri, "f" * 32)
    arm_run = f"{study.name}-{ARMS[0]}-s0"  # a run's name where the Study's is wanted
    with pytest.raises(TrackingError, match=f": '{arm_run}' is a run of Study '{study.name}' "):
        find_parent_run(store_uri, arm_run)
    _, runs = load_study_runs(store_uri, parent_id)
    with pytest.raises(
        TrackingError,
        match=f"run {runs[0].run_id} .* is not a Study's parent run .*; its parent run is "
        f"{parent_id}$",
    ):
        find_parent_run(store_uri, runs[0].run_id)
    with pytest.raises(ValueError, match='^"x\' or 1=1" is neither an MLflow run id nor a Study'):
        find_parent_run(store_uri, "x' or 1=1")
    with pytest.raises(TrackingError, match="no MLflow store at .*nowhere.db"):
        find_parent_run(f"sqlite:///{tmp_path / 'nowhere.db'}", "x")
    with pytest.raises(TrackingError, match="no run 'abc' at"):
        load_study_runs(store_uri, "abc")
