"""The curves PNG and the per-step mean and band behind it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from scipy import stats as sps  # type: ignore[import-untyped]

from sarl.study.history import RunHistory
from sarl.study.plot import curves_figure, panels, plot_curves, seed_band
from sarl.study.stats import mean_interval
from sarl.tracking.metrics import metric_info
from sarl.viz.curves import THICK_LW, THIN_LW
from tests.sarl.study.conftest import ARMS, SEEDS, K, history

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(seed: int, points: list[tuple[int, float]], key: str = "kl") -> RunHistory:
    return RunHistory("a", seed, f"r{seed}", "FINISHED", {key: points})


def test_band_aligns_steps_and_starts_at_three_seeds() -> None:
    runs = [
        _run(0, [(1, 1.0), (2, 2.0), (3, 3.0)], "x"),
        _run(1, [(1, 3.0), (2, 2.0)], "x"),  # stopped early: step 3 has one seed
        _run(2, [(1, 2.0), (2, float("nan"))], "x"),  # NaN at step 2 is not a value
    ]
    band = seed_band(runs, "x")  # "x": no known range, nothing clipped
    assert band.steps == [1, 2, 3]
    assert band.mean == pytest.approx([2.0, 2.0, 3.0])
    assert band.seeds == [3, 2, 1]
    half = sps.t.ppf(0.975, 2) * 1.0 / 3**0.5  # values 1, 3, 2: s = 1
    assert band.low[0] == pytest.approx(2.0 - half)
    assert band.high[0] == pytest.approx(2.0 + half)
    # Two seeds (step 2) and one (step 3) give no band: their lines are drawn instead.
    assert band.low[1:] == band.high[1:] == [None, None]
    assert seed_band(runs, "x", min_seeds=2).low[1] == 2.0  # equal values: zero width
    assert seed_band(runs, "entropy").steps == []


@pytest.mark.parametrize(
    ("key", "values", "low", "high"),
    [
        ("kl", [0.0, 0.0, 0.3], 0.0, None),  # KL >= 0
        ("accuracy", [0.9, 1.0, 1.0], None, 1.0),  # a share <= 1
        ("eval/heldout/avg_at_4", [0.0, 0.0, 0.05], 0.0, None),
    ],
)
def test_band_is_clipped_to_the_metric_range(
    key: str, values: list[float], low: float | None, high: float | None
) -> None:
    runs = [_run(seed, [(1, v)], key) for seed, v in enumerate(values)]
    raw = mean_interval(values)
    band = seed_band(runs, key)
    assert band.low == [raw.low if low is None else low]
    assert band.high == [raw.high if high is None else high]
    assert (low is None or raw.low < low) and (high is None or raw.high > high)  # were outside


def test_band_smooths_each_seed_before_the_mean() -> None:
    runs = [_run(0, [(1, 0.0), (2, 4.0)], "x"), _run(1, [(1, 2.0), (2, 2.0)], "x")]
    # trailing means over 2: seed 0 -> 0, 2; seed 1 -> 2, 2; their means 1, 2
    assert seed_band(runs, "x", window=2).mean == pytest.approx([1.0, 2.0])


def test_panels_name_the_held_out_metric_for_k() -> None:
    assert panels(8)[0] == ("held-out avg@8", "eval/heldout/avg_at_8")
    assert panels(8, "mean")[0] == ("mean avg@8", "eval/mean/avg_at_8")
    assert [key for _, key in panels(K)[1:]] == [
        "structure/score",
        "response_length",
        "accuracy",
        "kl",
        "entropy",
    ]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    return width, height


def test_plot_writes_a_png(tmp_path: Path) -> None:
    histories = [history(arm, seed) for arm in ARMS for seed in SEEDS]
    out = plot_curves(histories, ARMS, tmp_path / "sub" / "curves.png")
    assert out == tmp_path / "sub" / "curves.png"
    assert _png_size(out) == (1300, 780)
    assert out.stat().st_size > 30_000  # six panels of lines and bands, not a blank canvas


def test_plot_refuses_empty_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no runs to plot"):
        plot_curves([], ARMS, tmp_path / "curves.png")
    assert not (tmp_path / "curves.png").exists()


# -- what the figure shows -------------------------------------------------------------------------


def _noisy(arm: str, seed: int, steps: int = 64) -> RunHistory:
    """``steps`` training steps of accuracy zig-zagging by +-0.1 around a slow trend (every seed
    in phase, so the mean over seeds zig-zags too); evaluations at step 0 and the last step."""
    accuracy = [
        (t, 0.2 + 0.002 * t + 0.01 * seed + (0.1 if t % 2 else -0.1)) for t in range(1, steps + 1)
    ]
    held_out = [(0, 0.1), (steps, 0.2 + 0.01 * seed)]
    metrics = {"accuracy": accuracy, f"eval/heldout/avg_at_{K}": held_out}
    return RunHistory(arm, seed, f"{arm}{seed}".ljust(32, "0"), "FINISHED", metrics)


def _axes(fig: object, title: str) -> object:
    return next(ax for ax in fig.axes if ax.get_title() == title)  # type: ignore[attr-defined]


def test_fewer_than_three_seeds_are_thin_lines_around_a_thick_mean() -> None:
    fig = curves_figure([_noisy("a", s) for s in range(2)], ["a"])
    ax = _axes(fig, "training accuracy")
    assert sorted(line.get_linewidth() for line in ax.lines) == [THIN_LW, THIN_LW, THICK_LW]
    assert not ax.collections  # no band from two seeds
    assert "each seed thin" in fig._suptitle.get_text()
    assert "one seed" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_three_seeds_are_a_thick_mean_in_a_band() -> None:
    fig = curves_figure([_noisy("a", s) for s in range(3)], ["a"])
    ax = _axes(fig, "training accuracy")
    assert [line.get_linewidth() for line in ax.lines] == [THICK_LW]
    assert len(ax.collections) == 1  # the 95% band
    assert "95% interval band" in fig._suptitle.get_text()


def test_training_curves_are_smoothed_and_the_window_is_stated() -> None:
    fig = curves_figure([_noisy("a", s) for s in range(2)], ["a"])
    assert "trailing mean over 8 steps" in fig._suptitle.get_text()  # 64 steps / 8
    ax = _axes(fig, "training accuracy")
    mean = next(line for line in ax.lines if line.get_linewidth() == THICK_LW)
    trend = [0.2 + 0.002 * t + 0.005 for t in range(1, 65)]  # + the mean seed offset
    gaps = [abs(v - m) for v, m in zip(mean.get_ydata(), trend, strict=True)]
    # Raw, the mean zig-zags 0.1 off the trend at every step; a trailing mean over 8 steps
    # cancels the zig-zag, leaving the lag of the trend (0.002 x 3.5 steps) once a window is full.
    assert max(gaps[7:]) < 0.01
    assert max(gaps[:1]) == pytest.approx(0.1)  # step 1: a window of one point, as logged
    held_out = _axes(fig, f"held-out avg@{K}")
    assert sorted(len(line.get_xdata()) for line in held_out.lines) == [2, 2, 2]  # as logged


def test_axes_are_labelled_in_words_with_units() -> None:
    fig = curves_figure([history(arm, seed) for arm in ARMS for seed in SEEDS], ARMS)
    for title, key in panels(K):
        ax = _axes(fig, title)
        assert ax.get_ylabel() == metric_info(key).label  # type: ignore[attr-defined]
        assert ax.get_xlabel() == "training step"  # type: ignore[attr-defined]
    assert _axes(fig, "response length").get_ylabel() == "response length (tokens)"  # type: ignore[attr-defined]
