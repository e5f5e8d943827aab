"""The curves PNG and the per-step mean and band behind it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from scipy import stats as sps  # type: ignore[import-untyped]

from sarl.study.history import RunHistory
from sarl.study.plot import panels, plot_curves, seed_band
from tests.sarl.study.conftest import ARMS, SEEDS, K, history

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(seed: int, points: list[tuple[int, float]], key: str = "kl") -> RunHistory:
    return RunHistory("a", seed, f"r{seed}", "FINISHED", {key: points})


def test_band_aligns_steps_and_has_none_where_one_seed_logged() -> None:
    runs = [
        _run(0, [(1, 1.0), (2, 2.0), (3, 3.0)]),
        _run(1, [(1, 3.0), (2, 2.0)]),  # stopped early: step 3 has one seed
        _run(2, [(1, 2.0), (2, float("nan"))]),  # NaN at step 2 is not a value
    ]
    band = seed_band(runs, "kl")
    assert band.steps == [1, 2, 3]
    assert band.mean == pytest.approx([2.0, 2.0, 3.0])
    assert band.seeds == [3, 2, 1]
    half = sps.t.ppf(0.975, 2) * 1.0 / 3**0.5  # values 1, 3, 2: s = 1
    assert band.low[0] == pytest.approx(2.0 - half)
    assert band.high[0] == pytest.approx(2.0 + half)
    assert (band.low[1], band.high[1]) == (2.0, 2.0)  # equal values: zero width
    assert (band.low[2], band.high[2]) == (None, None)
    assert seed_band(runs, "entropy").steps == []


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
