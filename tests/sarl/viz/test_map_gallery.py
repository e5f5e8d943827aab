"""``sarl.reasoning_maps``: the maps of responses scored with a ``structure`` reward, as a
gallery that shows each map at the size it was drawn (legible in a ~900 px notebook)."""

from __future__ import annotations

import numpy as np
import pytest

import sarl
from sarl.rewards.base import Sample
from sarl.rewards.structure.reward import StructureReward, StructureRewardSettings

TRACE = "<think>a\n\nb\n\nc\n\na</think> \\boxed{1}"


class _OneHot:
    def embed(self, texts: list[str]) -> np.ndarray:
        return np.eye(max(len(texts), 1), dtype=np.float32)[: len(texts)]


@pytest.fixture
def structure() -> StructureReward:
    return StructureReward(StructureRewardSettings(workers=1), embedder=_OneHot())


def test_one_map_per_sample_with_its_caption(structure: StructureReward) -> None:
    with structure:
        gallery = sarl.reasoning_maps(
            structure, [Sample(TRACE), "<think>x</think>"], captions=["mul-1", "short"], title="t"
        )
    assert gallery.title == "t"
    assert [image.caption for image in gallery] == ["mul-1", "short"]
    assert all(image.png.startswith(b"\x89PNG") for image in gallery)
    html = gallery._repr_html_()
    assert "<figcaption>mul-1</figcaption>" in html
    # Shown at its own width (not shrunk to a thumbnail), never wider than the notebook.
    (width,) = {image.width_px for image in gallery}
    assert width is not None and 600 <= width <= 900
    assert f'width="{width}"' in html and "max-width:100%" in html


def test_captions_default_to_the_samples_place(structure: StructureReward) -> None:
    with structure:
        gallery = sarl.reasoning_maps(structure, [TRACE, TRACE])
    assert [image.caption for image in gallery] == ["sample 1", "sample 2"]


def test_captions_must_match_the_samples(structure: StructureReward) -> None:
    with structure, pytest.raises(ValueError, match="1 captions for 2 samples"):
        sarl.reasoning_maps(structure, [TRACE, TRACE], captions=["one"])


def test_only_the_structure_reward_draws_maps() -> None:
    with sarl.create_reward("ground_truth") as ground_truth, pytest.raises(TypeError) as raised:
        sarl.reasoning_maps(ground_truth, [TRACE])
    assert "'structure' reward, not 'ground_truth'" in str(raised.value)
