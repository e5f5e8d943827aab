"""The local runner with TTRL voting over more responses than it trains on: TRL generates and
trains on ``rollouts_per_prompt`` per prompt, the reward votes over ``votes_per_prompt``
(TTRL's n_votes_per_prompt / n_samples_per_prompt, PRIME-RL/TTRL 3e2cc93)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sarl.integrations.trl import TRLRewardFunc
from sarl.integrations.trl_votes import VOTE_ONLY
from sarl.rewards.base import Sample
from sarl.rewards.baselines.ttrl import TTRLReward
from sarl.runner.local import LocalOptions, run_local
from sarl.spec import load_experiment
from tests.sarl.runner.test_local import tiny_experiment

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow


def test_trl_trains_on_the_group_and_ttrl_votes_over_the_vote_set(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    voted: list[list[bool]] = []  # per scored group: which samples were drawn for the vote
    batches: list[int] = []  # completions TRL generated and scores per step
    score_groups, call = TTRLReward.score_groups, TRLRewardFunc.__call__

    def recorded(self: TTRLReward, groups: Sequence[Sequence[Sample]]) -> Any:
        voted.extend([bool(s.extra.get(VOTE_ONLY)) for s in g] for g in groups)
        return score_groups(self, groups)

    def counted(self: TRLRewardFunc, prompts: Any, completions: Any, *a: Any, **k: Any) -> Any:
        batches.append(len(completions))
        return call(self, prompts, completions, *a, **k)

    monkeypatch.setattr(TTRLReward, "score_groups", recorded)
    monkeypatch.setattr(TRLRewardFunc, "__call__", counted)
    doc = tiny_experiment(f"votes-{uuid.uuid4().hex[:6]}", algorithm={"max_steps": 2})
    doc["spec"]["reward"] = [{"name": "ttrl", "settings": {"votes_per_prompt": 6}}]
    uri = f"sqlite:///{workdir / 'votes.db'}"
    exp = load_experiment(doc)
    result = run_local(exp, LocalOptions(workdir=workdir, tracking_uri=uri, progress=False))

    algo = exp.spec.algorithm  # 2 prompts x 2 rollouts a step
    assert result.steps == 2
    assert batches == [algo.train_batch_size * algo.rollouts_per_prompt] * 2
    assert voted == [[False, False, True, True, True, True]] * (2 * algo.train_batch_size)
    run = mlflow.MlflowClient(uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and "ttrl/majority_ratio" in run.data.metrics
