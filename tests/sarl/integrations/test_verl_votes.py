"""Vote sets on verl: the rollouts of a prompt's vote set are scored whole and only its first
sessions are trained on (sarl.integrations.verl.votes), as TTRL's reference does
(PRIME-RL/TTRL 3e2cc93, `_select_top_k_per_prompt` in verl/verl/trainer/ppo/ray_trainer.py).

The key/tag handling runs everywhere; the replay buffer hook, the composed config and the rows
verl reads need verl (the verl environment, ``make test-verl``)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from sarl.integrations.verl.votes import (
    ROLLOUT_N_FIELD,
    TRAIN_GROUP_KWARG,
    keep_trained,
    trained_indices,
    vote_overrides,
)
from sarl.spec.experiment import Experiment

UID_A, UID_B = "3f0c5e0e-8d5f-4c55-9a1e-0d9a1c2b7f10", "9b8f6a3c-1d2e-4f50-8a7b-6c5d4e3f2a10"


@dataclass
class Batch:
    """TransferQueue's KVBatchMeta, as far as the replay buffer builds one."""

    partition_id: str
    keys: list[str]
    tags: list[dict[str, Any]]
    extra_info: dict[str, Any] = field(default_factory=dict)


def keys(uid: str, sessions: range, outputs: int = 1) -> list[str]:
    return [f"{uid}_{s}_{i}" for s in sessions for i in range(outputs)]


def test_the_first_sessions_of_each_prompt_are_trained_on() -> None:
    # sessions arrive in completion order, interleaved across prompts
    mixed = ["A_5_0", "B_0_0", "A_0_0", "A_7_0", "B_3_0", "A_1_0", "B_1_0", "B_2_0", "A_2_0"]
    batch_keys = [k.replace("A", UID_A).replace("B", UID_B) for k in mixed]
    kept = [mixed[i] for i in trained_indices(batch_keys, 2)]
    assert kept == ["B_0_0", "A_0_0", "A_1_0", "B_1_0"]  # batch order is kept


def test_a_multi_output_session_is_kept_or_dropped_whole() -> None:
    batch_keys = keys(UID_A, range(4), outputs=2)
    assert trained_indices(batch_keys, 3) == list(range(6))


def test_keep_trained_clears_the_vote_only_trajectories() -> None:
    batch_keys = keys(UID_A, range(8)) + keys(UID_B, range(8))
    batch = Batch("train", batch_keys, [{"n": i} for i in range(16)])
    cleared: list[dict[str, Any]] = []
    out = keep_trained(batch, 4, lambda **kwargs: cleared.append(kwargs))
    assert out.keys == keys(UID_A, range(4)) + keys(UID_B, range(4))
    assert [t["n"] for t in out.tags] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert cleared == [
        {"keys": keys(UID_A, range(4, 8)) + keys(UID_B, range(4, 8)), "partition_id": "train"}
    ]
    whole = keep_trained(out, 4, lambda **kwargs: cleared.append(kwargs))
    assert whole is out and len(cleared) == 1  # nothing to drop: nothing cleared


@pytest.mark.parametrize("key", ["no-session", f"{UID_A}_x_0", f"{UID_A}_0"])
def test_keys_of_another_shape_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="expected verl's '<uid>_<session>_<index>'"):
        trained_indices([key], 1)
    with pytest.raises(ValueError, match=f"{TRAIN_GROUP_KWARG}: must be >= 1"):
        trained_indices([], 0)


def ttrl_experiment(votes: int | None = 16, group: int = 4) -> Experiment:
    settings = {} if votes is None else {"votes_per_prompt": votes}
    spec = {
        "preset": "local-grpo-arithmetic",
        "algorithm": {"rollouts_per_prompt": group},
        "reward": [{"name": "ttrl", "settings": settings}],
    }
    return Experiment.model_validate({"metadata": {"name": "job"}, "spec": spec})


def test_training_rows_ask_verl_for_the_vote_set() -> None:
    from sarl_jobs.data import problems, verl_rows

    exp = ttrl_experiment()
    train, evals = problems(exp)
    assert {r[ROLLOUT_N_FIELD] for r in verl_rows(exp, train[:3], "train")} == {16}
    assert all(ROLLOUT_N_FIELD not in r for r in verl_rows(exp, evals[:3], "test"))
    plain = ttrl_experiment(votes=None)
    assert all(ROLLOUT_N_FIELD not in r for r in verl_rows(plain, train[:3], "train"))


# --- verl ---------------------------------------------------------------------------------------


def test_overrides_keep_rollout_n_the_trained_group_and_score_the_vote_set() -> None:
    pytest.importorskip("verl")
    from omegaconf import OmegaConf

    from sarl.integrations.verl.overrides import (
        MANAGER_OPTIONS_KEY,
        parse_manager_options,
        to_plain,
    )
    from sarl.integrations.verl.reward_manager import check_group_config
    from tests.sarl.integrations.test_verl_config import compose_verl, overrides_for

    exp = ttrl_experiment(votes=16, group=4)
    lines = overrides_for(exp)
    assert vote_overrides(4)[0] in lines
    cfg = compose_verl(lines)
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.n == 4  # mini-batches and advantages are sized by the trained group
    assert rollout.val_kwargs.n == 16  # validation scores whole vote sets too
    options = parse_manager_options(to_plain(OmegaConf.select(cfg, MANAGER_OPTIONS_KEY)))
    assert options.group_size == 16 and check_group_config(cfg, options) == 16
    sampler = cfg.trainer.v1.sampler
    assert sampler.custom_sampler.name == "SarlReplayBuffer"
    assert sampler.sampler_kwargs[TRAIN_GROUP_KWARG] == 4
    plain = compose_verl(overrides_for(ttrl_experiment(votes=None)))
    assert TRAIN_GROUP_KWARG not in plain.trainer.v1.sampler.sampler_kwargs
    assert plain.actor_rollout_ref.rollout.val_kwargs.n == 4


def test_rows_reach_the_agent_loop_with_their_rollout_count() -> None:
    pytest.importorskip("verl")
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import collate_fn

    from sarl_jobs.data import problems, verl_rows

    exp = ttrl_experiment()
    rows = verl_rows(exp, problems(exp)[0][:3], "train")
    # RLHFDataset.__getitem__ returns the row's columns; the trainer collates them and sends a
    # TensorDict, whose non-tensor rows the v1 agent loop reads as `v[i].data` before popping
    # __rollout_n__ for n (verl 0.9.1 trainer/ppo/v1/agent_loop_tq.py).
    batch = tu.get_tensordict(collate_fn([{ROLLOUT_N_FIELD: r[ROLLOUT_N_FIELD]} for r in rows]))
    (column,) = [v for k, v in batch.items() if k == ROLLOUT_N_FIELD]
    assert [range(column[i].data) for i in range(3)] == [range(16)] * 3  # n sessions each


def test_the_replay_buffer_trains_on_the_first_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("verl")
    cleared: list[dict[str, Any]] = []
    # transfer_queue is not installed with verl here: stand in for the calls the buffer makes.
    tq = types.SimpleNamespace(
        KVBatchMeta=Batch,
        kv_clear=lambda **kwargs: cleared.append(kwargs),
        kv_batch_get=lambda **kwargs: {"extra_fields": [{}] * len(kwargs["keys"])},
    )
    if "transfer_queue" not in sys.modules:
        monkeypatch.setitem(sys.modules, "transfer_queue", tq)
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from sarl.integrations.verl import sampler

    monkeypatch.setattr(sampler, "tq", tq)
    votes = Batch("train", keys(UID_A, range(8)), [{}] * 8)
    monkeypatch.setattr(ReplayBuffer, "sample", lambda self, *a, **k: (votes, {}))
    buffer = sampler.SarlReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={TRAIN_GROUP_KWARG: 4},
    )
    batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=1)
    assert batch.keys == keys(UID_A, range(4))
    assert cleared == [{"keys": keys(UID_A, range(4, 8)), "partition_id": "train"}]
    val, _ = buffer.sample(global_steps=1, partition_id="val", batch_size=1)
    assert val is votes  # validation keeps every response
