"""The reasoning maps of responses side by side, as a :class:`~sarl.display.Gallery`.

Called as ``sarl.reasoning_maps`` from notebooks and scripts, for responses scored offline with
the ``structure`` reward (the quickstart notebook's traces). The maps a training run logged are
read back from MLflow by :meth:`sarl.runner.result.RunResult.maps` instead.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sarl.display import Gallery

if TYPE_CHECKING:
    from sarl.rewards.base import Reward, Sample


def reasoning_maps(
    reward: Reward,
    samples: Sequence[Sample | str],
    *,
    captions: Sequence[str] | None = None,
    title: str = "reasoning maps",
) -> Gallery:
    """The reasoning map of each sample's response (a :class:`~sarl.rewards.base.Sample` or
    the response text), drawn as ``sarl map`` draws one with its caption as the map's title.

    ``reward`` is a ``structure`` reward (``sarl.create_reward("structure", ...)``): the
    responses are scored again through its scorer, with its settings and embedder, because the
    reward interface returns scores, not maps. ``captions`` default to ``sample 1``,
    ``sample 2``, ...; ``TypeError`` for another reward, ``ValueError`` when the captions are
    not one per sample.
    """
    from sarl.rewards.structure.reward import StructureReward
    from sarl.viz.reasoning_map import draw_reasoning_map

    if not isinstance(reward, StructureReward):
        raise TypeError(
            f"reasoning maps are drawn by the 'structure' reward, not {reward.name!r}: "
            "pass sarl.create_reward('structure', ...)"
        )
    names = [f"sample {i + 1}" for i in range(len(samples))] if captions is None else captions
    if len(names) != len(samples):
        raise ValueError(f"{len(names)} captions for {len(samples)} samples")
    texts = [s if isinstance(s, str) else s.response for s in samples]
    results = reward.scorer.score_batch(texts)
    with tempfile.TemporaryDirectory(prefix="sarl-maps-") as tmp:
        files = [
            (name, draw_reasoning_map(result, Path(tmp, f"map-{i}.png"), title=name))
            for i, (name, result) in enumerate(zip(names, results, strict=True))
        ]
        return Gallery.from_files(title, files)  # reads the bytes before the files go
