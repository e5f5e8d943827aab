"""The reasoning-map picture is a real PNG for every kind of map, degenerate ones included."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.rewards.structure import score_labels
from sarl.viz.reasoning_map import draw_reasoning_map, reasoning_map_figure


@pytest.mark.parametrize("labels", [[0, 1, 2, 0, 3, 1], [], [0, 0, 0], list(range(20)) * 2])
def test_png_is_written(tmp_path: Path, labels: list[int]) -> None:
    out = draw_reasoning_map(score_labels(labels), tmp_path / "sub" / "map.png", title="t")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000


@pytest.mark.parametrize(
    ("labels", "xticks", "yticks"),
    [
        ([0], [1], [0]),  # one step: one tick, not 0.945 ... 1.050
        ([0, 1], [1, 2], [0, 1]),
        ([0, 1, 2, 0, 3, 1], [1, 2, 3, 4, 5, 6], [0, 1, 2, 3]),
        ([], [], []),  # no steps: no ticks at all
    ],
)
def test_step_order_ticks_whole_steps_and_functions_only(
    labels: list[int], xticks: list[int], yticks: list[int]
) -> None:
    walk = reasoning_map_figure(score_labels(labels)).axes[1]
    assert list(walk.get_xticks()) == xticks
    assert list(walk.get_yticks()) == yticks
    if labels:
        assert walk.get_xlim() == (0.5, len(labels) + 0.5)


def test_long_walks_tick_whole_numbers_within_the_steps() -> None:
    walk = reasoning_map_figure(score_labels(list(range(5)) * 9)).axes[1]
    ticks = [t for t in walk.get_xticks() if 0.5 <= t <= 45.5]
    assert ticks and all(t == int(t) for t in ticks)


def test_title_and_caption_are_drawn_literally_and_stored_in_the_png(tmp_path: Path) -> None:
    from PIL import Image

    title = "arm structure · seed 0 · step 0 (before RL) · sample 1 of 3\ncorrect: 7"
    caption = "prompt: costs $5 and $6?\nresponse: " + "<think>step</think> \\boxed{11} " * 9
    out = draw_reasoning_map(score_labels([0, 1]), tmp_path / "m.png", title=title, caption=caption)
    assert Image.open(out).text["Title"] == title
    assert Image.open(out).text["Description"] == caption
    fig = reasoning_map_figure(score_labels([0, 1]), title=title, caption=caption)
    shown = [t.get_text() for t in fig.texts]
    assert len(shown) == 1 and r"costs \$5 and \$6?" in shown[0]  # no math mode
    assert max(len(line) for line in shown[0].splitlines()) <= 90  # wrapped to the width
    assert fig.axes[0].get_title().startswith(title.replace("$", r"\$"))
