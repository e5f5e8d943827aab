"""``SarlReplayBuffer``: verl 0.9.1's sync replay buffer plus the batch's reward-validity metrics.

Loaded by verl (never imported by sarl itself; imports verl): the v1 trainer builds its replay
buffer from ``trainer.v1.sampler.custom_sampler.{path,name}`` when both are set
(``PPOTrainer._build_replay_buffer`` in ``verl/trainer/ppo/v1/trainer_base.py`` of verl 0.9.1),
and merges the metrics ``sample()`` returns into the step's metrics (``_step_once``: ``batch,
off_policy_metrics = self.replay_buffer.sample(...)``; ``metrics.update(off_policy_metrics)``),
which verl's logger writes with the step and the job's tracker sends to MLflow. That is the one
place of the v1 trainer where code of ours sees a whole training batch with each trajectory's
``reward_extra_info`` before its metrics are logged, so the figures land at the step they belong
to. :func:`sarl.integrations.verl.config.verl_overrides` sets::

    trainer.v1.sampler.custom_sampler.path=pkg://sarl.integrations.verl.sampler
    trainer.v1.sampler.custom_sampler.name=SarlReplayBuffer
    ++trainer.v1.sampler.sampler_kwargs.sarl_reward=<the single reward's name>

Sampling itself is verl's (``ReplayBuffer.sample``, unchanged), except that with a vote set
(``sampler_kwargs.sarl_train_group_size``, :mod:`sarl.integrations.verl.votes`) a training batch
keeps only the responses trained on. What a custom sampler changes in
verl 0.9.1: the trainer passes it only the base constructor arguments, so DAPO group filtering
(``algorithm.filter_groups``) and ``sync_refill_failed_groups`` are off; sarl's specs set neither,
and :func:`~sarl.integrations.verl.config.verl_overrides` keeps the trainer in ``sync`` mode,
for which this class is made (the async buffer samples differently).

The figures (:mod:`sarl.integrations.verl.validity`) are computed from the training partition
only; a failure to compute them is logged once and never stops training.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from sarl.integrations.verl.validity import batch_validity
from sarl.integrations.verl.votes import TRAIN_GROUP_KWARG, keep_trained

logger = logging.getLogger(__name__)

#: ``sampler_kwargs`` key naming the reward a single-term spec trains on.
REWARD_KWARG = "sarl_reward"


class SarlReplayBuffer(ReplayBuffer):  # type: ignore[misc,unused-ignore]
    """verl's sync replay buffer; ``sample`` also returns ``validity/<reward>/...`` metrics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = self.sampler_kwargs or {}
        self._reward_name = str(options.get(REWARD_KWARG) or "reward")
        self._warned = False
        # Set when a reward votes over more responses than are trained on (verl.votes).
        group = options.get(TRAIN_GROUP_KWARG)
        self._train_group_size = None if group is None else int(group)

    def sample(
        self, global_steps: int, partition_id: str, batch_size: int
    ) -> tuple[Any, dict[str, Any]]:
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if partition_id == "train" and self._train_group_size is not None:
            # The vote set was scored whole; train on each prompt's first responses only.
            batch = keep_trained(batch, self._train_group_size, tq.kv_clear)
        if partition_id == "train":
            metrics = {**metrics, **self._validity(batch)}
        return batch, metrics

    def _validity(self, batch: Any) -> dict[str, float]:
        try:
            keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
            keys = [batch.keys[i] for i in keep]
            if not keys:
                return {}
            data = tq.kv_batch_get(
                keys=keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
            )
            infos = [reward_extra_info(value) for value in data["extra_fields"]]
            return batch_validity(keys, infos, self._reward_name)
        except Exception as e:  # a metric must never stop training
            if not self._warned:
                self._warned = True
                logger.warning("reward-validity metrics not computed: %s", e, exc_info=e)
            return {}


def reward_extra_info(value: Any) -> Mapping[str, Any]:
    """A trajectory's ``reward_extra_info`` from its TransferQueue ``extra_fields`` value (a
    ``NonTensorData`` wrapping a dict, or the dict), as verl's own DAPO filter reads it
    (``ReplayBuffer._dapo_filtered_keys``)."""
    fields = getattr(value, "data", value)
    info = fields.get("reward_extra_info", {}) if isinstance(fields, Mapping) else {}
    return info if isinstance(info, Mapping) else {}
