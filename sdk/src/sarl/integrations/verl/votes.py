"""Vote sets on verl 0.9.1: generate the vote set, score it whole, train on the first responses.

Used by :func:`sarl.integrations.verl.config.verl_overrides`, the job's parquet rows
(``sarl_jobs.data.verl_rows``) and the replay buffer (:mod:`sarl.integrations.verl.sampler`).
Pure: imports neither verl nor TransferQueue.

TTRL's reference (PRIME-RL/TTRL at 3e2cc93, ``verl/verl/trainer/ppo/ray_trainer.py``) sets
``rollout.n`` to ``n_votes_per_prompt`` for generation, scores every response (the label is the
vote of all of them, ``verl/verl/workers/reward_manager/ttrl.py``), keeps the first
``n_samples_per_prompt`` of each prompt (``_select_top_k_per_prompt``) and only then computes
advantages, with ``rollout.n`` set back to ``n_samples_per_prompt``. The same on verl 0.9.1's v1
trainer (``trainer.use_v1``, ``sync`` mode), with its own hooks and no change to its loop:

* ``actor_rollout_ref.rollout.n`` stays the trained group (``algorithm.rollouts_per_prompt``),
  so everything the trainer sizes by it (mini-batches, advantages, the batch multiple) is the
  trained batch's;
* each training prompt asks for the vote set with verl's per-prompt ``__rollout_n__``
  (:data:`ROLLOUT_N_FIELD`, a column of the training parquet; the agent loop pops it for ``n``,
  ``trainer/ppo/v1/agent_loop_tq.py:_run_prompt``);
* ``SarlRewardManager`` collects groups of the vote set's size (``group_size``), so the reward
  scores the vote set whole, and validation samples that many per prompt (``val_kwargs.n``: a
  group reward needs whole groups there too);
* the replay buffer (``trainer.v1.sampler.custom_sampler``, :class:`SarlReplayBuffer`) hands the
  trainer only the trajectories of each prompt's first ``rollouts_per_prompt`` sessions
  (:func:`keep_trained`, given the size by ``sampler_kwargs``, :data:`TRAIN_GROUP_KWARG`) and
  clears the others from TransferQueue. The trainer's own steps (old and reference log-probs,
  advantages, updates) never see the vote-only responses.

Which responses are trained on: the sessions ``0 .. rollouts_per_prompt-1`` of each prompt, i.e.
the first in launch order. Sessions are i.i.d. samples of the same policy, so this is a uniformly
random subset of the vote set. The reference takes the first of each prompt in its batch order,
which its sequence-length balancing has permuted; taking them by session id keeps the choice
independent of the responses' lengths.

Cost: ``votes_per_prompt / rollouts_per_prompt`` times the rollouts (and reward calls) per step,
and as many per validation prompt; the training steps after sampling cost what they did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

#: verl 0.9.1's per-prompt rollout count: a dataset column the v1 agent loop reads for ``n``.
ROLLOUT_N_FIELD: Final = "__rollout_n__"
#: ``trainer.v1.sampler.sampler_kwargs`` key: responses per prompt that are trained on.
TRAIN_GROUP_KWARG: Final = "sarl_train_group_size"


def trained_indices(keys: Sequence[str], group_size: int) -> list[int]:
    """Positions in ``keys`` of the trajectories to train on: those of each prompt's
    ``group_size`` lowest session ids. Keys are TransferQueue's ``{uid}_{session}_{index}``
    (``agent_loop_tq.py:_agent_loop_postprocess``; a multi-output session has several indexes,
    all kept or all dropped). ValueError for a key of another shape."""
    if group_size < 1:
        raise ValueError(f"{TRAIN_GROUP_KWARG}: must be >= 1, got {group_size}")
    sessions: dict[str, set[int]] = {}
    parsed: list[tuple[str, int]] = []
    for key in keys:
        uid, session = _uid_session(key)
        sessions.setdefault(uid, set()).add(session)
        parsed.append((uid, session))
    kept = {uid: set(sorted(ids)[:group_size]) for uid, ids in sessions.items()}
    return [i for i, (uid, session) in enumerate(parsed) if session in kept[uid]]


def _uid_session(key: str) -> tuple[str, int]:
    parts = key.rsplit("_", 2)  # the uid (a uuid4), the session id, the output index
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(
            f"trajectory key {key!r}: expected verl's '<uid>_<session>_<index>' (verl 0.9.1 v1 "
            "trainer); a vote set needs the session ids to tell the trained responses"
        )
    return parts[0], int(parts[1])


def keep_trained(batch: Any, group_size: int, clear: Callable[..., Any]) -> Any:
    """``batch`` (a TransferQueue ``KVBatchMeta``: ``partition_id``, ``keys``, ``tags``) with
    only the trajectories to train on (:func:`trained_indices`); the others are removed with
    ``clear(keys=..., partition_id=...)`` (``transfer_queue.kv_clear``), as the trainer clears
    the trajectories it trained on at the end of a step."""
    keep = trained_indices(batch.keys, group_size)
    if len(keep) == len(batch.keys):
        return batch
    kept = set(keep)
    dropped = [key for i, key in enumerate(batch.keys) if i not in kept]
    clear(keys=dropped, partition_id=batch.partition_id)
    return type(batch)(
        partition_id=batch.partition_id,
        keys=[batch.keys[i] for i in keep],
        tags=[batch.tags[i] for i in keep],
    )


def vote_overrides(rollouts_per_prompt: int) -> list[str]:
    """The Hydra override that tells the replay buffer how many responses are trained on."""
    return [f"++trainer.v1.sampler.sampler_kwargs.{TRAIN_GROUP_KWARG}={rollouts_per_prompt}"]
