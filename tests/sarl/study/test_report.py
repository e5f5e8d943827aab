"""The Study report: aggregates and paired differences against scipy, flags, the three files, and
``report_for`` end to end on a real MLflow store."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from scipy import stats as sps  # type: ignore[import-untyped]

from sarl.spec.study import Study
from sarl.study.history import RUN_KEYS, RunHistory, load_study_runs
from sarl.study.report import (
    COMPARED,
    FLAG_LENGTH_COLLAPSE,
    FLAG_SR_UP_ACCURACY_DOWN,
    FLAG_TEXT,
    NoFinishedRuns,
    ReportFiles,
    StudyReport,
    build_report,
    log_report,
    report_for,
    write_report,
)
from sarl.study.stats import mean_interval
from sarl.tracking.metrics import SHARE, Range
from sarl.tracking.tracker import Tracker, TrackingError
from tests.sarl.study.conftest import ARMS, REFERENCE, SEEDS, K, history, log_study, make_study

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
AVG = f"eval/heldout/avg_at_{K}"


def run(
    arm: str,
    seed: int,
    *,
    acc: tuple[float, float] = (0.3, 0.3),
    sr: tuple[float, float] = (0.5, 0.5),
    length: tuple[float, float] = (100.0, 100.0),
    answer_rate: tuple[float, float] = (0.9, 0.9),
) -> RunHistory:
    """A run of 4 training steps (quarters: step 1 and step 4) evaluated at steps 0 and 4."""

    def line(start: float, end: float) -> list[tuple[int, float]]:
        return [(1, start), (2, start), (3, end), (4, end)]

    metrics = {
        AVG: [(0, acc[0]), (2, (acc[0] + acc[1]) / 2), (4, acc[1])],
        "structure/score": line(*sr),
        "response_length": line(*length),
        "answer_rate": line(*answer_rate),
    }
    return RunHistory(arm, seed, f"{arm}{seed}".ljust(32, "0"), "FINISHED", metrics)


# -- aggregates and paired differences -------------------------------------------------------------

ACC_END = {"gt": [0.30, 0.36, 0.31], "sarl": [0.38, 0.41, 0.35]}


def noisy_runs() -> list[RunHistory]:
    return [
        run(arm, seed, acc=(0.2 + 0.01 * seed, ACC_END[arm][seed]))
        for arm in ("gt", "sarl")
        for seed in range(3)
    ]


def test_aggregates_are_t_intervals_over_seeds() -> None:
    report = build_report("s", "gt", ["gt", "sarl"], noisy_runs(), K)
    for arm in ("gt", "sarl"):
        ends = ACC_END[arm]
        changes = [end - (0.2 + 0.01 * seed) for seed, end in enumerate(ends)]
        for key, values in (("eval_accuracy_end", ends), ("eval_accuracy_change", changes)):
            got = report.aggregate[arm][key]
            low, high = sps.t.interval(0.95, 2, loc=np.mean(values), scale=sps.sem(values))
            assert got.n == 3
            assert (got.mean, got.low, got.high) == (
                pytest.approx(np.mean(values)),
                pytest.approx(low),
                pytest.approx(high),
            )
    assert report.aggregate["gt"]["eval_accuracy_start"].mean == pytest.approx(0.21)


def test_paired_differences_match_ttest_rel() -> None:
    report = build_report("s", "gt", ["gt", "sarl"], noisy_runs(), K)
    assert report.vs_reference["gt"] == {}
    paired = report.vs_reference["sarl"]
    assert set(paired) == {f"{m}_{end}" for m in COMPARED for end in ("end", "change")}
    ci = sps.ttest_rel(ACC_END["sarl"], ACC_END["gt"]).confidence_interval(0.95)
    got = paired["eval_accuracy_end"]
    assert got.n == 3
    assert (got.low, got.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    # the start is the same per seed, so the change differs exactly like the end does
    assert paired["eval_accuracy_change"].mean == pytest.approx(got.mean)


def test_reference_not_an_arm_and_repeated_runs_are_refused() -> None:
    with pytest.raises(ValueError, match="reference arm 'nope' is not an arm: gt, sarl"):
        build_report("s", "nope", ["gt", "sarl"], noisy_runs(), K)
    with pytest.raises(ValueError, match="arm 'gt' seed 0 has two runs"):
        build_report("s", "gt", ["gt"], [run("gt", 0), run("gt", 0)], K)


def test_missing_arms_and_seeds_are_noted() -> None:
    runs = [run("gt", 0), run("gt", 1), run("sarl", 0), run("extra", 1)]
    report = build_report("s", "gt", ["gt", "sarl", "empty"], runs, K, notes=["from the store"])
    assert report.arms == ("gt", "sarl", "empty", "extra")
    assert report.notes == (
        "from the store",
        "arms not in the Study's arm list, reported last: extra",
        "arm sarl: no FINISHED run for seed 1",
        "arm empty: no FINISHED runs",
        "arm extra: no FINISHED run for seed 0",
    )
    assert report.aggregate["empty"]["sr_end"].n == 0
    assert report.vs_reference["sarl"]["sr_end"].n == 1  # only seed 0 is shared


# -- flags -----------------------------------------------------------------------------------------


def _flags(*runs: RunHistory) -> tuple[str, ...]:
    return build_report("s", "a", ["a"], list(runs), K).flags["a"]


def test_sr_up_while_accuracy_down_on_every_seed_is_flagged() -> None:
    runs = [
        run("a", seed, sr=(0.5, 0.7 + 0.01 * seed), acc=(0.30, 0.20 - 0.01 * seed))
        for seed in range(3)
    ]
    assert _flags(*runs) == (FLAG_SR_UP_ACCURACY_DOWN,)


def test_sr_up_while_answer_rate_down_is_flagged() -> None:
    runs = [
        run("a", seed, sr=(0.5, 0.7 + 0.01 * seed), answer_rate=(0.9, 0.5 - 0.02 * seed))
        for seed in range(3)
    ]
    assert _flags(*runs) == (FLAG_SR_UP_ACCURACY_DOWN,)


@pytest.mark.parametrize(
    "acc_end",
    [
        [0.35, 0.40, 0.38],  # accuracy up too
        [0.20, 0.40, 0.25],  # down on two seeds, up on one: the interval straddles 0
    ],
)
def test_no_flag_unless_accuracy_surely_fell(acc_end: list[float]) -> None:
    runs = [run("a", s, sr=(0.5, 0.7 + 0.01 * s), acc=(0.3, acc_end[s])) for s in range(3)]
    assert _flags(*runs) == ()


def test_sr_rise_within_noise_is_enough_when_accuracy_surely_fell() -> None:
    """Two seeds: SR's t-interval straddles 0 although SR rose on both; accuracy surely fell."""
    runs = [run("a", s, sr=(0.26, [0.43, 0.40][s]), acc=(0.14, 0.01 - 0.002 * s)) for s in (0, 1)]
    report = build_report("s", "a", ["a"], runs, K)
    assert report.aggregate["a"]["sr_change"].low is not None
    assert report.aggregate["a"]["sr_change"].low < 0 < report.aggregate["a"]["sr_change"].mean
    assert report.flags["a"] == (FLAG_SR_UP_ACCURACY_DOWN,)


@pytest.mark.parametrize(
    "sr_end",
    [
        [0.45, 0.47, 0.49],  # SR down
        [0.45, 0.50, 0.52],  # down on average
    ],
)
def test_no_flag_unless_sr_rose(sr_end: list[float]) -> None:
    runs = [run("a", s, sr=(0.5, sr_end[s]), acc=(0.3, 0.2 - 0.01 * s)) for s in range(3)]
    report = build_report("s", "a", ["a"], runs, K)
    assert report.aggregate["a"]["eval_accuracy_change"].high is not None
    assert report.aggregate["a"]["eval_accuracy_change"].high < 0  # accuracy surely fell
    assert report.flags["a"] == ()


def test_another_benchmark() -> None:
    runs = [run("a", 0, acc=(0.1, 0.4)), run("a", 1)]
    renamed = [dataclasses.replace(r, metrics={"eval/mean/avg_at_4": r.metrics[AVG]}) for r in runs]
    report = build_report("s", "a", ["a"], renamed, K, benchmark="mean")
    assert report.runs["a"][0]["eval_accuracy_end"] == 0.4
    assert "avg@4 and pass@4 on `mean`" in report.to_markdown()
    assert build_report("s", "a", ["a"], renamed, K).runs["a"][0]["eval_accuracy_end"] is None


def test_one_seed_flags_by_the_sign_of_its_change() -> None:
    assert _flags(run("a", 0, sr=(0.5, 0.6), acc=(0.3, 0.2))) == (FLAG_SR_UP_ACCURACY_DOWN,)
    assert _flags(run("a", 0, sr=(0.5, 0.6), acc=(0.3, 0.4))) == ()


@pytest.mark.parametrize(("end", "flagged"), [(40.0, True), (49.0, True), (50.0, False)])
def test_length_collapse(end: float, flagged: bool) -> None:
    runs = [run("a", s, length=(100.0, end)) for s in range(2)]
    assert (FLAG_LENGTH_COLLAPSE in _flags(*runs)) is flagged


# -- intervals within what a metric can be ---------------------------------------------------------


def test_an_interval_below_zero_from_two_seeds_is_clipped_and_the_text_says_so() -> None:
    runs = [
        run("gt", 0, acc=(0.1, 0.3)),
        run("gt", 1, acc=(0.1, 0.32)),
        run("sarl", 0, acc=(0.1, 0.0)),  # held-out avg@k ends at 0.00 and 0.02: mean 0.01 ±
        run("sarl", 1, acc=(0.1, 0.02)),  # 12.7 x 0.01 (t with one degree of freedom)
    ]
    report = build_report("s", "gt", ["gt", "sarl"], runs, K)
    raw = mean_interval([0.0, 0.02])
    assert raw.low is not None and raw.high is not None and raw.low < 0  # unclipped: -0.117
    end = report.aggregate["sarl"]["eval_accuracy_end"]
    assert (end.mean, end.low, end.high) == (pytest.approx(0.01), 0.0, pytest.approx(raw.high))
    assert end.clipped_to == SHARE
    assert report.aggregate["gt"]["eval_accuracy_end"].clipped_to is None  # [0.183, 0.437]

    text = report.to_markdown()
    row = next(line for line in text.splitlines() if line.startswith("| `sarl` |"))
    assert f"0.010 [0.000, {raw.high:.3f}] clipped to [0, 1]" in row
    gt_row = next(line for line in text.splitlines() if line.startswith("| `gt` |"))
    assert "clipped" not in gt_row
    assert "clipped to the values possible" in text  # the reading guide says why
    summary = report.to_json()["arms"]["sarl"]["aggregate"]["eval_accuracy_end"]
    assert (summary["low"], summary["clipped_to"]) == (0.0, [0.0, 1.0])
    arms = report.to_dataframes()["arms"].set_index(["arm", "metric"])
    assert arms.loc[("sarl", "eval_accuracy_end"), "clipped_to"] == "[0, 1]"


def test_changes_and_paired_differences_clip_to_the_range_of_a_difference() -> None:
    # answer rate falls from 1 to 0 on one seed and stays on the other: the change interval
    # over two seeds would reach below -1, which no change of a share can.
    runs = [
        run("gt", 0),
        run("gt", 1),
        run("sarl", 0, answer_rate=(1.0, 0.0)),
        run("sarl", 1, answer_rate=(1.0, 1.0)),
    ]
    report = build_report("s", "gt", ["gt", "sarl"], runs, K)
    change = report.aggregate["sarl"]["answer_rate_change"]
    assert (change.low, change.clipped_to) == (-1.0, Range(-1.0, 1.0))
    paired = report.vs_reference["sarl"]["answer_rate_end"]  # sarl - gt: -0.9 and +0.1
    assert (paired.low, paired.clipped_to) == (-1.0, Range(-1.0, 1.0))
    length = report.aggregate["sarl"]["length_change"]  # length has no top: change unbounded
    assert length.clipped_to is None


# -- the document forms ----------------------------------------------------------------------------


@pytest.fixture
def report() -> StudyReport:
    """The default Study's runs (conftest.plausible), no MLflow."""
    histories = [history(arm, seed) for arm in ARMS for seed in SEEDS]
    return build_report("demo", REFERENCE, list(ARMS), histories, K)


def test_summary_json_has_exactly_the_documented_keys(report: StudyReport) -> None:
    doc = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert set(doc) == {"study", "reference", "k", "arms"}
    assert (doc["study"], doc["reference"], doc["k"]) == ("demo", REFERENCE, K)
    assert list(doc["arms"]) == list(ARMS)
    aggregate_keys = {f"{m}_{end}" for m in COMPARED for end in ("start", "end", "change")}
    for arm, data in doc["arms"].items():
        assert set(data) == {
            "runs",
            "aggregate",
            "vs_reference",
            "flags",
            "validity",
            "validity_windows",
        }
        assert data["validity"] == {}  # these runs logged no reward validity
        assert list(data["runs"]) == [str(s) for s in SEEDS]
        for summary in data["runs"].values():
            assert list(summary) == list(RUN_KEYS)
        assert set(data["aggregate"]) == aggregate_keys
        for interval in data["aggregate"].values():
            assert set(interval) == {"mean", "low", "high", "n", "clipped_to"}
        assert bool(data["vs_reference"]) is (arm != REFERENCE)
    sarl = doc["arms"]["sarl"]
    assert sarl["runs"]["1"]["eval_accuracy_end"] == pytest.approx(0.26)
    assert sarl["aggregate"]["eval_accuracy_change"]["mean"] == pytest.approx(0.05)
    assert sarl["vs_reference"]["sr_change"]["mean"] == pytest.approx((0.2 - 0.02) * 6 / 8)


def test_markdown_has_a_row_per_arm_with_flags(report: StudyReport) -> None:
    flagged = build_report(
        "demo", "a", ["a", "b"], [run("a", 0), run("b", 0, length=(100.0, 30.0))], K
    )
    for rep in (report, flagged):
        text = rep.to_markdown()
        arm_rows = [line for line in text.splitlines() if line.startswith("| `")]
        assert [row.split(" | ")[0] for row in arm_rows[: len(rep.arms)]] == [
            f"| `{arm}`" for arm in rep.arms
        ]
        assert f"avg@{K} start → end" in text
    rows: dict[str, str] = {}
    for line in report.to_markdown().splitlines():
        rows.setdefault(line.split(" | ")[0], line)  # the main table comes first
    assert "0.205 → 0.255 [0.191, 0.319]" in rows["| `sarl`"]  # 2 seeds: t(0.975, 1) = 12.7
    assert "| reference |" in rows[f"| `{REFERENCE}`"]
    text = flagged.to_markdown()
    row_b = next(line for line in text.splitlines() if line.startswith("| `b` |"))
    assert row_b.endswith(f"| {FLAG_TEXT[FLAG_LENGTH_COLLAPSE]} |")
    assert "(1 seed)" in row_b


def test_dataframes(report: StudyReport) -> None:
    frames = report.to_dataframes()
    assert set(frames) == {"runs", "arms", "paired"}
    assert list(frames["runs"].columns) == ["arm", "seed", *RUN_KEYS]
    assert len(frames["runs"]) == len(ARMS) * len(SEEDS)
    assert len(frames["arms"]) == len(ARMS) * len(COMPARED) * 3
    assert set(frames["paired"]["arm"]) == {a for a in ARMS if a != REFERENCE}
    row = frames["arms"].query("arm == 'sarl' and metric == 'eval_accuracy_change'")
    assert row["mean"].item() == pytest.approx(0.05)


@pytest.mark.usefixtures("no_drawing")
def test_write_report_writes_three_files_atomically(report: StudyReport, tmp_path: Path) -> None:
    histories = [history(arm, seed) for arm in ARMS for seed in SEEDS]
    files = write_report(report, histories, tmp_path / "out")
    assert files == ReportFiles.under(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "curves.png",
        "report.md",
        "summary.json",
    ]  # no temporary files left
    assert json.loads(files.summary.read_text()) == json.loads(json.dumps(report.to_json()))
    assert files.markdown.read_text() == report.to_markdown()
    assert files.curves.read_bytes().startswith(PNG_MAGIC)


def test_write_report_with_no_runs_writes_nothing(report: StudyReport, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no runs to plot"):
        write_report(report, [], tmp_path)
    assert list(tmp_path.iterdir()) == []


# -- end to end on MLflow --------------------------------------------------------------------------


def test_report_for_end_to_end(
    store_uri: str, logged_study: tuple[Study, str], tmp_path: Path
) -> None:
    study, parent_id = logged_study
    report = report_for(store_uri, study.name, tmp_path / "out")
    assert (report.study, report.reference, report.arms, report.k) == (
        study.name,
        REFERENCE,
        ARMS,  # the Study document's order, not alphabetical
        K,
    )
    assert report.notes == ()
    _, histories = load_study_runs(store_uri, parent_id)
    assert {r["mlflow_run_id"] for arm in ARMS for r in report.runs[arm].values()} == {
        h.run_id for h in histories
    }
    files = ReportFiles.under(tmp_path / "out")
    summary = json.loads(files.summary.read_text())
    assert summary == json.loads(json.dumps(report.to_json()))
    assert summary["arms"]["sarl"]["runs"]["0"]["sr_start"] == pytest.approx(0.5 + 0.2 * 1.5 / 8)
    assert all(f"`{arm}`" in files.markdown.read_text() for arm in ARMS)
    assert files.curves.read_bytes().startswith(PNG_MAGIC)

    client = MlflowClient(store_uri)
    logged = {f.path for f in client.list_artifacts(parent_id, "report")}
    assert logged == {"report/summary.json", "report/report.md", "report/curves.png"}
    metrics = client.get_run(parent_id).data.metrics
    assert metrics["study/sarl/eval_accuracy_change"] == pytest.approx(0.05)
    assert metrics["study/sarl/vs_reference/sr_change"] == pytest.approx(0.135)
    assert metrics["study/gt/flags"] == 0.0
    assert "study/gt/vs_reference/sr_change" not in metrics


@pytest.mark.usefixtures("no_drawing")
def test_report_for_without_a_stored_document(store_uri: str, tmp_path: Path) -> None:
    study = make_study()
    log_study(store_uri, study, store_document=False)
    report = report_for(store_uri, study.name, tmp_path, log=False)
    assert (report.arms, report.reference, report.k) == (("gt", "sarl"), "gt", K)
    assert report.notes[-1].startswith("no Study document with the parent run")


@pytest.mark.usefixtures("no_drawing")
def test_report_for_with_the_runner_s_study(
    store_uri: str, logged_study: tuple[Study, str], tmp_path: Path
) -> None:
    study, parent_id = logged_study
    mine = make_study(study.name, reference="sarl")  # the stored document says "gt"
    report = report_for(store_uri, parent_id, tmp_path, log=False, study=mine)
    assert (report.arms, report.reference, report.notes) == (ARMS, "sarl", ())
    assert report.vs_reference["sarl"] == {} and report.vs_reference["gt"] != {}


def test_report_for_a_study_without_finished_runs(store_uri: str, tmp_path: Path) -> None:
    study = make_study(arms=["gt"], reference="gt", seeds=[0])
    log_study(store_uri, study, status={("gt", 0): "FAILED"})
    with pytest.raises(NoFinishedRuns, match=f"Study '{study.name}' .* has no FINISHED runs") as e:
        report_for(store_uri, study.name, tmp_path)
    assert isinstance(e.value, TrackingError) and isinstance(e.value, ValueError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("no_drawing")
def test_log_report_through_the_parent_s_tracker(
    store_uri: str, report: StudyReport, tmp_path: Path
) -> None:
    study = make_study()
    parent_id = log_study(store_uri, study, with_runs=False)
    files = write_report(report, [history("gt", 0)], tmp_path)
    other = Tracker.start(store_uri, study.mlflow_experiment, "other", spec_yaml="")
    with pytest.raises(ValueError, match=f"logs to run {other.run_id}, not to the Study's"):
        log_report(other, parent_id, files)
    other.finish()
    with Tracker.resume(store_uri, parent_id) as tracker:
        log_report(tracker, parent_id, files)
    client = MlflowClient(store_uri)
    assert len(client.list_artifacts(parent_id, "report")) == 3
    assert client.get_run(parent_id).data.metrics["study/sarl/eval_accuracy_end"] == (
        pytest.approx(0.255)
    )
