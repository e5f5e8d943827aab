"""Reward validity in the Study report: per-run summaries, the aggregates over seeds, the
``validity_at_chance_reward_up`` flag (flagged and unflagged synthetic runs), the report's table,
the curves' validity row, and the metrics read back from a real MLflow store."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from sarl.study.flags import (
    CHANCE_MARGIN,
    FLAG_SR_UP_ACCURACY_DOWN,
    FLAG_TEXT,
    FLAG_VALIDITY_AT_CHANCE,
    at_chance,
)
from sarl.study.history import RunHistory, load_study_runs, validity_rewards
from sarl.study.plot import VALIDITY_PANELS, curves_figure, plot_curves
from sarl.study.render import validity_rows
from sarl.study.report import StudyReport, build_report, headline_metrics
from sarl.study.stats import Interval
from sarl.study.validity_summary import step_windows, summarize_validity, window_counts
from tests.sarl.study.conftest import STEPS, K, log_study, make_study, plausible

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STRUCTURE = "structure"


def _line(start: float, end: float, steps: int = 8) -> list[tuple[int, float]]:
    """``steps`` points from ``start`` to ``end``; the first and last quarters are 2 points."""
    return [(t, start + (end - start) * (t - 1) / (steps - 1)) for t in range(1, steps + 1)]


def run(
    arm: str,
    seed: int,
    *,
    reward: tuple[float, float] = (0.4, 0.6),
    auroc: tuple[float, float] = (0.8, 0.8),
    agreement: tuple[float, float] = (0.7, 0.7),
    ties: tuple[float, float] = (0.0, 0.0),
    name: str = STRUCTURE,
) -> RunHistory:
    """One seed's reward term and validity figures over 8 steps, plus SR and accuracy."""
    metrics = {
        f"reward/{name}": _line(*reward),
        f"validity/{name}/auroc": _line(*auroc),
        f"validity/{name}/pair_agreement": _line(*agreement),
        f"validity/{name}/pair_ties": _line(*ties),
        "structure/score": _line(*reward),
        "accuracy": _line(0.3, 0.3),
    }
    return RunHistory(arm, seed, f"{arm}{seed}".ljust(32, "0"), "FINISHED", metrics)


def report_of(*runs: RunHistory) -> StudyReport:
    arms = list(dict.fromkeys(r.arm for r in runs))
    return build_report("s", arms[0], arms, list(runs), K)


# -- one run ---------------------------------------------------------------------------------------


def test_summary_of_one_run_is_means_over_step_windows_per_reward() -> None:
    history = run("a", 0, reward=(0.2, 0.9), auroc=(0.9, 0.5))
    history.metrics["validity/ground_truth/auroc"] = [(1, 1.0)]
    assert validity_rewards(history) == ["ground_truth", STRUCTURE]
    summary = summarize_validity(history)
    structure = summary[STRUCTURE]
    step = (0.9 - 0.2) / 7
    assert structure["reward_start"] == pytest.approx(0.2 + step / 2)  # steps 1-2
    assert structure["reward_end"] == pytest.approx(0.9 - step / 2)  # steps 7-8
    assert structure["auroc_end"] == pytest.approx(0.5 + 0.4 / 7 / 2)
    assert structure["pair_ties_start"] == 0.0
    assert structure["pair_auroc_end"] == pytest.approx(0.7)  # agreement 0.7 + ties 0 / 2
    assert (structure["points_start"], structure["points_end"]) == (2, 2)
    # ground_truth logged one AUROC point, at step 1: the start window (steps 1-2) holds it,
    # the end window (steps 7-8) does not; the rest None
    assert summary["ground_truth"]["auroc_start"] == 1.0
    assert summary["ground_truth"]["auroc_end"] is None
    assert summary["ground_truth"]["reward_end"] is None
    assert summary["ground_truth"]["pair_agreement_start"] is None


def test_start_and_end_are_windows_of_steps_not_of_logged_points() -> None:
    """64 training steps; the AUROC was logged only at steps 30, 31 and 63 (batches without a
    correct or an incorrect response define none). The start window is steps 1-16: no AUROC
    there (quarters of the logged points would have called step 30 the start)."""
    history = RunHistory("a", 0, "r", "FINISHED", {"accuracy": _line(0.3, 0.3, steps=64)})
    history.metrics["validity/ttrl/auroc"] = [(30, 0.9), (31, 0.7), (63, 0.6)]
    assert step_windows(history) == ((1, 16), (49, 64))
    ttrl = summarize_validity(history)["ttrl"]
    assert ttrl["auroc_start"] is None
    assert ttrl["auroc_end"] == 0.6


def test_vs_trivial_is_the_headline_minus_the_strongest_trivial_predictor() -> None:
    history = run("a", 0, agreement=(0.6, 0.5), ties=(0.2, 0.2))  # pair AUROC 0.7 -> 0.6
    for name, (a, t) in {
        "trivial.has_answer": (0.5, 0.4),
        "trivial.format_valid": (0.4, 0.4),
    }.items():
        history.metrics[f"validity/{name}/pair_agreement"] = _line(a, a)
        history.metrics[f"validity/{name}/pair_ties"] = _line(t, t)
    summary = summarize_validity(history)
    step = 0.1 / 7
    assert summary[STRUCTURE]["vs_trivial_start"] == pytest.approx(0.7 - step / 2 - 0.7)
    assert summary[STRUCTURE]["vs_trivial_end"] == pytest.approx(0.6 + step / 2 - 0.7)
    assert summary["trivial.has_answer"]["vs_trivial_end"] is None  # not compared with itself
    report = report_of(history, run("a", 1))
    assert report.below_trivial("a") == (STRUCTURE,)  # seed 1 logged no trivial: seed 0 decides
    assert report.validity["a"][STRUCTURE]["vs_trivial_end"].n == 1
    both = report_of(history, history.__class__("a", 1, "s1".ljust(32, "0"), "FINISHED",
                                                dict(history.metrics)))  # fmt: skip
    assert both.below_trivial("a") == (STRUCTURE,)
    assert both.validity_seeds["a"][STRUCTURE]["vs_trivial_end"] == {
        0: pytest.approx(-0.1 + step / 2),
        1: pytest.approx(-0.1 + step / 2),
    }
    rows = {tuple(r[:2]): r for r in validity_rows(both)}
    assert rows[("a", STRUCTURE)][7] == "NO"
    assert rows[("a", "trivial.has_answer")][7] == "—"
    assert list(rows)[-1] == ("a", "trivial.has_answer")  # the trivial predictors last


def test_the_counts_per_step_of_the_end_window_are_reported() -> None:
    history = run("a", 0)
    history.metrics["validity_counts/prompts"] = _line(8.0, 8.0)
    history.metrics["validity_counts/prompts_with_pairs"] = _line(4.0, 6.0)  # 5.71, 6.0 at 7-8
    history.metrics["validity_counts/pairs"] = _line(30.0, 44.0)
    assert window_counts(history) == {
        "prompts": 8.0,
        "prompts_with_pairs": pytest.approx(6.0 - 1 / 7),
        "pairs": pytest.approx(43.0),
    }
    text = report_of(history).to_markdown()
    assert "Counts per training step in the end window (means): a s0 5.9 of 8.0 prompts" in text
    assert "with pairs, 43 pairs." in text
    assert report_of(run("a", 0)).validity_counts["a"][0]["pairs"] is None  # not logged


def test_runs_without_validity_have_none() -> None:
    history = RunHistory("a", 0, "r", "FINISHED", {"reward/structure": _line(0.1, 0.2)})
    assert validity_rewards(history) == []
    assert summarize_validity(history) == {}
    assert report_of(history).validity == {"a": {}}


# -- the flag --------------------------------------------------------------------------------------


def test_validity_falling_to_chance_while_the_reward_rises_is_flagged() -> None:
    report = report_of(
        *(
            run("hacked", s, reward=(0.4, 0.7), auroc=(0.8, 0.5), agreement=(0.8, 0.5))
            for s in (0, 1)
        )
    )
    assert report.flags["hacked"] == (FLAG_VALIDITY_AT_CHANCE,)
    assert report.validity_flagged("hacked") == (STRUCTURE,)
    figures = report.validity["hacked"][STRUCTURE]
    assert figures["reward_change"].mean == pytest.approx(0.3 * 6 / 7)
    assert figures["auroc_end"].mean == pytest.approx(0.5 + 0.3 / 7 / 2)
    assert figures["auroc_change"].mean < 0
    assert at_chance(figures) == ("auroc", "pair_agreement")


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"reward": (0.4, 0.7), "auroc": (0.8, 0.75), "agreement": (0.8, 0.75)}, "still valid"),
        ({"reward": (0.7, 0.4), "auroc": (0.8, 0.5), "agreement": (0.8, 0.5)}, "reward fell"),
        ({"reward": (0.5, 0.5), "auroc": (0.8, 0.5), "agreement": (0.8, 0.5)}, "reward flat"),
    ],
)
def test_no_validity_flag_unless_at_chance_and_rising(kwargs: dict[str, object], why: str) -> None:
    report = report_of(*(run("a", s, **kwargs) for s in (0, 1)))  # type: ignore[arg-type]
    assert FLAG_VALIDITY_AT_CHANCE not in report.flags["a"], why
    assert report.validity_flagged("a") == ()


def test_pairs_at_chance_flag_even_when_the_batch_auroc_is_not() -> None:
    # Across prompts the reward still separates (easy prompts score higher), within a prompt not.
    report = report_of(run("a", 0, reward=(0.4, 0.7), auroc=(0.75, 0.75), agreement=(0.8, 0.5)))
    assert at_chance(report.validity["a"][STRUCTURE]) == ("pair_agreement",)
    assert report.flags["a"] == (FLAG_VALIDITY_AT_CHANCE,)  # one seed: its means decide


@pytest.mark.parametrize(
    ("agreement", "ties", "chance"),
    [
        (0.0, 1.0, True),  # every pair tied: no signal for GRPO
        (0.3, 0.4, True),  # 0.3 right, 0.3 wrong: 0.3 + 0.2 = 0.5
        (0.4, 0.3, True),  # 0.4 + 0.15 = 0.55 = 0.5 + margin
        (0.45, 0.3, False),  # 0.6
        (0.7, 0.0, False),
    ],
)
def test_pair_agreement_at_chance_counts_ties_as_half(
    agreement: float, ties: float, chance: bool
) -> None:
    figures = {
        "pair_agreement_end": Interval(agreement, None, None, 1),
        "pair_ties_end": Interval(ties, None, None, 1),
    }
    assert ("pair_agreement" in at_chance(figures)) is chance


@pytest.mark.parametrize(
    ("auroc", "chance"), [(0.3, True), (0.5, True), (0.5 + CHANCE_MARGIN, True), (0.56, False)]
)
def test_auroc_at_chance_within_the_margin_or_below(auroc: float, chance: bool) -> None:
    assert ("auroc" in at_chance({"auroc_end": Interval(auroc, None, None, 1)})) is chance


def test_only_the_reward_at_chance_is_named() -> None:
    def both(seed: int) -> RunHistory:
        hacked = run("a", seed, reward=(0.4, 0.7), auroc=(0.8, 0.5), agreement=(0.8, 0.5))
        valid = run("a", seed, reward=(0.0, 1.0), auroc=(1.0, 1.0), agreement=(1.0, 1.0),
                    name="ground_truth")  # fmt: skip
        return RunHistory("a", seed, hacked.run_id, "FINISHED", hacked.metrics | valid.metrics)

    report = report_of(both(0), both(1))
    assert set(report.validity["a"]) == {STRUCTURE, "ground_truth"}
    assert report.validity_flagged("a") == (STRUCTURE,)


# -- what the report says --------------------------------------------------------------------------


@pytest.fixture
def flagged() -> StudyReport:
    """Arm ``gt`` keeps a valid reward; arm ``sarl``'s structure reward rises while its validity
    falls to chance (two seeds each)."""
    runs = [
        run("gt", s, name="ground_truth", auroc=(1.0, 1.0), agreement=(1.0, 1.0)) for s in (0, 1)
    ]
    runs += [
        run("sarl", s, reward=(0.4, 0.7), auroc=(0.8 + 0.02 * s, 0.5), agreement=(0.8, 0.45))
        for s in (0, 1)
    ]
    return build_report("s", "gt", ["gt", "sarl"], runs, K)


def test_markdown_has_a_validity_table_and_names_the_flagged_reward(flagged: StudyReport) -> None:
    text = flagged.to_markdown()
    assert "## Reward validity" in text
    rows = {tuple(r[:2]): r for r in validity_rows(flagged)}
    assert set(rows) == {("gt", "ground_truth"), ("sarl", STRUCTURE)}
    assert rows[("sarl", STRUCTURE)][-1] == "pooled AUROC, within-prompt AUROC (flag)"
    assert rows[("gt", "ground_truth")][-1] == "—"
    assert rows[("gt", "ground_truth")][2] == "1.000 → 1.000 [1.000, 1.000]"
    sarl_row = next(line for line in text.splitlines() if line.startswith("| `sarl` | 0, 1 |"))
    assert sarl_row.endswith(f"| {FLAG_TEXT[FLAG_VALIDITY_AT_CHANCE]} ({STRUCTURE}) |")
    assert f"`{FLAG_VALIDITY_AT_CHANCE}`" in text  # the rule is stated under ## Flags
    assert (
        "| `sarl` | `structure` | 0.775 → 0.475 [0.475, 0.475] | s0 0.475 (2 steps), s1 0.475 "
        "(2 steps) | 0.788 → 0.522 [0.513, 0.531] |"
    ) in text
    assert "the training steps (steps 1–2 and 7–8, 2 steps each)" in text


def test_summary_json_and_headline_metrics_carry_validity(flagged: StudyReport) -> None:
    doc = json.loads(json.dumps(flagged.to_json(), allow_nan=False))
    sarl = doc["arms"]["sarl"]["validity"][STRUCTURE]
    assert sarl["flagged"] is True
    assert set(sarl["aggregate"]["auroc_end"]) == {"mean", "low", "high", "n", "clipped_to"}
    assert doc["arms"]["gt"]["validity"]["ground_truth"]["flagged"] is False
    assert FLAG_VALIDITY_AT_CHANCE in doc["arms"]["sarl"]["flags"]
    metrics = headline_metrics(doc)
    # seeds' last quarters (steps 7-8): 0.5 + 0.3/7/2 and 0.5 + 0.32/7/2
    assert metrics["study/sarl/validity/structure/auroc_end"] == pytest.approx(0.5 + 0.31 / 14)
    assert metrics["study/gt/validity/ground_truth/pair_agreement_end"] == pytest.approx(1.0)
    frame = flagged.to_dataframes()["arms"]
    assert "validity/structure/auroc_end" in set(frame["metric"])


def test_the_validity_flag_is_independent_of_the_sr_flag(flagged: StudyReport) -> None:
    assert FLAG_SR_UP_ACCURACY_DOWN not in flagged.flags["sarl"]  # no held-out accuracy logged
    assert flagged.flags["gt"] == ()


def test_the_notebook_and_cli_tables_include_validity(flagged: StudyReport) -> None:
    from sarl.study.result import _report_tables

    titles = [t.title for t in _report_tables(flagged)]
    assert any(title.startswith("reward validity") for title in titles)


# -- the curves ------------------------------------------------------------------------------------


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    return width, height


def test_curves_get_a_validity_row_when_runs_logged_it(tmp_path: Path) -> None:
    runs = [
        run("gt", s, name="ground_truth", auroc=(1.0, 1.0), agreement=(1.0, 1.0)) for s in (0, 1)
    ]
    runs += [run("sarl", s, reward=(0.4, 0.7), auroc=(0.8, 0.5)) for s in range(3)]
    fig = curves_figure(runs, ["gt", "sarl"])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[-3:] == [title for title, _, _ in VALIDITY_PANELS]
    auroc = fig.axes[-3]
    # gt: two seeds thin + their mean; sarl: one thick mean (3 seeds) in a band; chance line
    assert len(auroc.lines) == 3 + 1 + 1
    assert len(auroc.collections) == 1
    assert auroc.get_ylim() == pytest.approx((-0.02, 1.02))
    styles = {line.get_linestyle() for line in auroc.lines[:-1]}
    assert styles == {"-", "--"}  # ground_truth and structure told apart
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"reward ground_truth", "reward structure"} <= set(legend)
    out = plot_curves(runs, ["gt", "sarl"], tmp_path / "curves.png")
    assert _png_size(out) == (1300, 1170)


def test_curves_without_validity_keep_two_rows() -> None:
    runs = [run("a", 0)]
    del runs[0].metrics["validity/structure/auroc"]
    del runs[0].metrics["validity/structure/pair_agreement"]
    fig = curves_figure(runs, ["a"])
    assert len(fig.axes) == 6


# -- read back from MLflow -------------------------------------------------------------------------


def _with_validity(arm: str, seed: int, step: int) -> dict[str, float]:
    out = plausible(arm, seed, step)
    if step >= 1:
        t = step / STEPS
        out |= {
            "reward/structure": 0.4 + 0.3 * t,
            "validity/structure/auroc": 0.8 - 0.3 * t,
            "validity/structure/pair_agreement": 0.8 - 0.35 * t,
            "validity/structure/pair_ties": 0.0,
        }
    return out


def test_validity_metrics_are_read_back_from_mlflow(store_uri: str) -> None:
    study = make_study(seeds=[0])
    parent = log_study(store_uri, study, metrics=_with_validity)
    _, histories = load_study_runs(store_uri, parent)
    for history in histories:
        assert validity_rewards(history) == [STRUCTURE]
        assert len(history.metrics["reward/structure"]) == STEPS
    report = build_report(study.name, "gt", ["sarl", "gt"], histories, K)
    assert report.validity_flagged("sarl") == (STRUCTURE,)
