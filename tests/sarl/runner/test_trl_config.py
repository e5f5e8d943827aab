"""``mask_truncated_completions`` is on exactly when a reward term masks truncated completions
(``tag_maxflow``, tagged-reasoning A.7), for GRPO and RLOO alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from sarl.runner.trl_config import masks_truncated, trainer_classes, training_args
from sarl.spec.experiment import Experiment

MAXFLOW = {"name": "tag_maxflow", "settings": {"model": "some/model"}}


def experiment(preset: str, reward: list[dict[str, Any]]) -> Experiment:
    return Experiment.model_validate(
        {"metadata": {"name": "x"}, "spec": {"preset": preset, "reward": reward}}
    )


@pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning")  # TRL 1.16 sets the old alias
@pytest.mark.parametrize("preset", ["local-grpo-arithmetic", "local-rloo-countdown"])
@pytest.mark.parametrize(
    ("reward", "masked"),
    [
        ([MAXFLOW], True),
        ([{"name": "ground_truth", "weight": 1.0}, {**MAXFLOW, "weight": 0.5}], True),
        ([{"name": "ground_truth"}], False),
        ([{"name": "format_length"}, {"name": "tag_format"}], False),
    ],
)
def test_mask_truncated_completions_follows_the_rewards(
    preset: str, reward: list[dict[str, Any]], masked: bool, tmp_path: Path
) -> None:
    exp = experiment(preset, reward)
    config_cls, _ = trainer_classes(exp.spec.algorithm.name)
    weights = [t.weight for t in exp.spec.reward]
    args = training_args(config_cls, exp, tmp_path, weights, progress=False)
    assert masks_truncated(exp) is masked
    assert args.mask_truncated_completions is masked
