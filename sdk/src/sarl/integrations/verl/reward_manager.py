"""``SarlRewardManager``: a verl 0.9.1 reward manager that gives group rewards whole groups.

Loaded by verl (never imported by sarl itself; imports verl and torch) through
:func:`sarl.integrations.verl.overrides.verl_reward_overrides` with ``group=True``::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=SarlRewardManager
    reward.reward_manager.module.path=pkg://sarl.integrations.verl.reward_manager
    reward.num_workers=1
    ++reward.reward_kwargs.sarl.reward=structure   # ManagerOptions, see overrides.py

The verl 0.9.1 contract (paths under ``verl/``):

* ``trainer/ppo/reward.py:load_reward_manager`` instantiates the class returned by
  ``resolve_reward_manager_cls`` as ``cls(config=<full trainer config>, tokenizer=<actor
  tokenizer>, compute_score=<custom function or verl default>, reward_router_address=...,
  reward_model_tokenizer=...)`` inside each ``RewardLoopWorker`` Ray actor
  (``experimental/reward_loop/reward_loop.py``; tokenizer from ``actor_rollout_ref.model``).
* The base class is ``experimental/reward_loop/reward_manager/base.py:RewardManagerBase``; the
  only hook is ``async run_single(data: DataProto) -> {"reward_score": float,
  "reward_extra_info": dict}``, called once per response (``data`` holds one trajectory; multi-
  output agent loops send several rows and, as ``naive.py`` does, the last one is scored). There
  is no batch ``__call__(data, return_dict)`` any more (that was ``verl/workers/reward_manager``,
  unused by 0.9.1's trainer).
* Token placement is verl's: the score goes to the last valid response token, index
  ``attention_mask[:, prompt_len:].sum(-1) - 1`` (``RewardManagerBase.assemble_rm_scores`` in the
  colocated path, ``experimental/agent_loop/agent_loop.py:_postprocess`` when streaming), and
  ``reward_extra_info`` values are stacked per key into ``non_tensor_batch`` with the keys of
  the first sample, so every sample returns the same keys.
* ``RewardLoopWorker.compute_score`` calls ``run_single`` unless a reward model is enabled
  (``reward.reward_model.enable``) and no custom function is set: then verl scores with the
  reward model and this manager is bypassed.
* ``uid`` is verl's per-prompt id in ``non_tensor_batch``: a fresh uuid per dataset row, repeated
  ``rollout.n`` times (``trainer/ppo/ray_trainer.py:fit``/``_validate``; the v1 trainer keys its
  replay buffer by it, ``trainer/ppo/v1/agent_loop_tq.py``), and it reaches ``run_single``.

Because verl sends responses one at a time, grouping happens here:
:class:`~sarl.integrations.verl.batcher.GroupCollector` holds each uid's responses until
``group_size`` (default ``actor_rollout_ref.rollout.n``) have arrived, and complete groups
arriving close together are scored in one ``ascore_groups`` call (micro-batch). Per-sample rewards
skip the wait and are only micro-batched. Preconditions for group rewards, checked at start-up
with a :class:`RewardConfigError`: ``reward.num_workers=1`` (each response goes to a *random*
reward worker, ``agent_loop.py:_compute_score``) and, when validation runs,
``val_kwargs.n == group_size`` (the reward loop does not say whether a response is a validation
one). Known limit: Ray async actors run at most 1000 calls at once
(``ray/_common/ray_constants.py:DEFAULT_MAX_CONCURRENCY_ASYNC``) and waiting responses hold a
slot, so ``train_batch_size * group_size`` above that may stall groups until ``group_timeout_s``
(a warning is logged). Per-prompt ``__rollout_n__`` (v1 trainer) is not supported.

Truncation: ``Sample.extra["truncated"]`` is set for every response (rewards with
``masks_truncated``, i.e. ``tag_maxflow``, read it; tagged-reasoning A.7). verl 0.9.1 pads
``responses`` to ``rollout.response_length`` (``agent_loop.py:_postprocess``) and counts a
response as clipped when its valid length reaches that (``trainer/ppo/metric_utils.py``,
``response_length/clip_ratio``); here it is truncated when it fills the buffer *and* its last
token is not an end token (the tokenizer's EOS or pad id, the ids TRL uses), so a response that
ends with EOS exactly at the limit is not. verl has no switch that drops truncated responses from
the loss, so they are still trained on with the reward's ``truncated_score``.

Several reward terms (the ``terms`` option): scored as one weighted sum
(:mod:`sarl.integrations.verl.terms`), kept in whole groups when any term needs them.

Errors follow the ``on_error`` policy of ``compute_score`` (raise by default); an incomplete group
is an error for each of its members. Extra info keys: ``score``, the reward's components
(undefined ones ``None``; with ``terms``, ``reward/<name>`` and ``<name>/<component>`` of every
term) and ``reward_failed``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from sarl.integrations.verl.batcher import SHARED, GroupCollector, GroupIncompleteError
from sarl.integrations.verl.compute_score import (
    VerlResult,
    bounded,
    make_sample,
    on_failure,
    shared_reward,
    verl_result,
)
from sarl.integrations.verl.overrides import (
    MANAGER_OPTIONS_KEY,
    ManagerOptions,
    parse_manager_options,
    to_plain,
)
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import RewardConfigError, get_reward_class, parse_settings

logger = logging.getLogger(__name__)

# ray/_common/ray_constants.py: calls an async Ray actor (the reward worker) runs at once.
RAY_ASYNC_ACTOR_CONCURRENCY = 1000
_GROUP_HINT = (
    "every response of a prompt must reach this worker (reward.num_workers=1) and groups must "
    "have group_size responses (actor_rollout_ref.rollout.n, val_kwargs.n)"
)


# verl is typed, but mypy without verl installed sees Any: ignore subclassing Any there only.
class SarlRewardManager(RewardManagerBase):  # type: ignore[misc,unused-ignore]
    """Scores verl responses with a registered sarl reward, keeping groups (same uid) whole."""

    def __init__(
        self,
        config: DictConfig,
        tokenizer: Any,
        compute_score: Any = None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        **_: Any,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)
        raw = OmegaConf.select(config, MANAGER_OPTIONS_KEY, default=None)
        self.options = parse_manager_options(None if raw is None else to_plain(raw))
        # Fail at start-up rather than on the first response.
        terms = self.options.term_list()
        for term in terms:
            parse_settings(term.reward, term.settings)
        needs_group = any(get_reward_class(t.reward).needs_group for t in terms)
        self.group_size = check_group_config(config, self.options) if needs_group else None
        if OmegaConf.select(config, "reward.custom_reward_function.path", default=None):
            logger.warning(
                "reward.custom_reward_function.path is set, but SarlRewardManager scores with "
                "sarl reward %r and does not call it",
                self.options.label(),
            )
        self._collector: GroupCollector | None = None

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """Score the last trajectory row of ``data``; returns verl's reward-loop result dict."""
        item = data[len(data) - 1]
        uid = item.non_tensor_batch.get("uid")
        if self.group_size is not None and uid is None:
            raise RewardConfigError(
                f"reward {self.options.label()!r} needs groups, but the data has no 'uid' "
                "in non_tensor_batch"
            )
        sample = await asyncio.to_thread(self.decode_sample, item)
        reward = await shared_reward(self.options)
        try:
            result = verl_result(await self._score(reward, uid, sample), reward, sample)
        except Exception as e:
            result = self._on_failure(e, reward, uid)
        return {"reward_score": result["score"], "reward_extra_info": result}

    def decode_sample(self, item: Any) -> Sample:
        """Decode one ``DataProtoItem`` into a :class:`Sample` (valid tokens only, as naive.py)."""
        tokenizer: Any = self.tokenizer  # a transformers tokenizer (verl annotates AutoTokenizer)
        prompt_ids = item.batch["prompts"]  # (prompt_len,), left-padded
        response_ids = item.batch["responses"]  # (response_len,), right-padded
        mask = item.batch["attention_mask"]  # (prompt_len + response_len,)
        prompt_len = prompt_ids.shape[-1]
        valid_response = int(mask[prompt_len:].sum())
        prompt = tokenizer.decode(prompt_ids[mask[:prompt_len].bool()], skip_special_tokens=True)
        response = tokenizer.decode(response_ids[:valid_response], skip_special_tokens=True)
        fields = item.non_tensor_batch
        reward_model = fields.get("reward_model")
        truth = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
        extra_info = dict(fields.get("extra_info") or {})
        if "uid" in fields:
            extra_info["uid"] = fields["uid"]
        end_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
        extra_info["truncated"] = response_truncated(response_ids, valid_response, end_ids)
        return make_sample(
            response,
            prompt=prompt,
            data_source=fields.get("data_source"),
            ground_truth=truth,
            extra_info=extra_info,
        )

    async def _score(self, reward: Reward, uid: Any, sample: Sample) -> RewardOutput:
        batcher = SHARED.batcher(
            reward,
            max_batch_samples=self.options.max_batch_samples,
            max_wait_s=self.options.max_wait_ms / 1000.0,
        )
        if self.group_size is None:
            return await bounded(batcher.score_sample(sample), self.options.timeout_s)
        if self._collector is None:
            self._collector = GroupCollector(
                batcher,
                group_size=self.group_size,
                timeout_s=self.options.group_timeout_s,
                score_timeout_s=self.options.timeout_s,
            )
        return await self._collector.score(uid, sample)

    def _on_failure(self, error: Exception, reward: Reward, uid: Any) -> VerlResult:
        context = f"uid={uid!r}"
        if isinstance(error, GroupIncompleteError):
            context += f"; {_GROUP_HINT}"
        return on_failure(error, reward, self.options, context)


def response_truncated(response_ids: Any, valid_length: int, end_ids: set[int]) -> bool:
    """Whether a response was cut at ``rollout.response_length``: it fills the padded
    ``responses`` buffer ``(response_len,)`` and its last valid token ends nothing."""
    if valid_length < response_ids.shape[-1] or valid_length == 0:
        return False
    return int(response_ids[valid_length - 1]) not in end_ids


def check_group_config(config: DictConfig, options: ManagerOptions) -> int:
    """The group size of a group reward; raises :class:`RewardConfigError` where verl would
    split or resize groups."""
    size = options.group_size or OmegaConf.select(config, "actor_rollout_ref.rollout.n")
    if not size:
        raise RewardConfigError(
            f"{MANAGER_OPTIONS_KEY}.group_size: required (actor_rollout_ref.rollout.n is not set)"
        )
    workers = OmegaConf.select(config, "reward.num_workers", default=1)
    if workers != 1:
        raise RewardConfigError(
            f"reward.num_workers={workers}: group rewards need 1, because verl sends each "
            "response to a random reward worker and a group must meet in one process"
        )
    val_n = OmegaConf.select(config, "actor_rollout_ref.rollout.val_kwargs.n", default=size)
    validates = bool(OmegaConf.select(config, "trainer.val_before_train", default=False)) or (
        (OmegaConf.select(config, "trainer.test_freq", default=-1) or -1) > 0
    )
    if validates and val_n != size:
        raise RewardConfigError(
            f"actor_rollout_ref.rollout.val_kwargs.n={val_n}: must equal the group size {size} "
            "for group rewards (verl's reward loop does not mark validation responses), or turn "
            "validation off (trainer.val_before_train=false, trainer.test_freq=-1)"
        )
    batch = OmegaConf.select(config, "data.train_batch_size", default=0) or 0
    if batch * size > RAY_ASYNC_ACTOR_CONCURRENCY:
        logger.warning(
            "data.train_batch_size * group_size = %d exceeds the %d calls a Ray async actor runs "
            "at once; responses waiting for siblings hold those slots, so groups may stall until "
            "group_timeout_s",
            batch * size,
            RAY_ASYNC_ACTOR_CONCURRENCY,
        )
    return int(size)
