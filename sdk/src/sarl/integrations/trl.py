"""TRL adapter: a registered sarl reward as a ``reward_funcs`` entry of TRL's GRPO/RLOO trainers.

Called by user training scripts and the TRL job entrypoint::

    from sarl.integrations.trl import bind_trainer, make_trl_reward

    embedder = {"kind": "openai", "url": "http://embedder:8000", "model": "all-MiniLM-L6-v2"}
    reward = make_trl_reward("structure", {"embedder": embedder})
    trainer = GRPOTrainer(model=..., reward_funcs=[accuracy_reward, reward], ...)
    bind_trainer([reward], trainer)  # the policy (embedder kind "policy") and the stop token ids

What TRL passes, checked against TRL 1.16 (``_calculate_rewards`` in ``trl/trainer/grpo_trainer.py``
and ``rloo_trainer.py``, identical in both): keyword arguments ``prompts``, ``completions`` and
``completion_ids`` (one entry per completion of this process's batch), every dataset column except
``prompt``/``completion``/``completion_ids`` as a list aligned with ``completions``,
``trainer_state`` (``transformers.TrainerState``), ``log_extra(column, values)`` (extra columns of
the completions table), ``log_metric(name, value)`` (a scalar metric) and, with environments,
``environments``. Completions are strings for plain-text prompts and, for conversational prompts,
lists of message dicts: ``[{"role": "assistant", "content": ...}]``, with ``reasoning_content`` (or
``thinking``) split off when the tokenizer has a response schema, and further tool/assistant
messages appended after tool calls.

What this adapter does with them:

* Text scored: a string completion as is; a conversational one is its *last* assistant message,
  with a split-off reasoning field put back inside the reward's ``think_open``/``think_close`` tags
  (default ``<think>``/``</think>``) so step segmentation sees the reasoning. Text parts of a list
  ``content`` are joined.
* Groups: TRL's ``RepeatSampler`` yields each prompt ``num_generations`` times in a row, so the
  completions of one prompt are consecutive. Runs of consecutive equal prompts form the groups of
  one ``Reward.score_groups`` call (the whole local batch at once, so the embedder gets one batched
  request). With several processes TRL may split a group across them (see the figure in
  ``GRPOTrainer._get_train_sampler``); that is harmless for per-sample rewards but not for group
  rewards, so pass ``num_generations`` for those: a run whose length is not a multiple of it (a
  group cut at the batch edge) then raises ``ValueError`` instead of being scored as a group.
* Metrics: the batch mean of every reward component (NaN values skipped; a component that is NaN
  for every sample is not logged in that batch) goes to ``log_metric`` as ``<reward>/<component>``,
  e.g. ``structure/clustering``. TRL averages these per logging step across processes and writes
  them next to its ``rewards/sarl_structure/mean``. Without ``log_metric`` (called outside TRL)
  nothing is logged.
* Reward validity: when every completion of the batch has a ground truth, the reward's AUROC
  against correctness over the batch and its pairwise agreement within each prompt's group
  (:mod:`sarl.evaluation.validity`) go to ``log_metric`` as ``validity/<reward>/auroc``,
  ``validity/<reward>/pair_agreement`` and ``validity/<reward>/pair_ties`` — for every reward
  function, so a weight-0 reward is measured too, and the same for the trivial predictors
  ``trivial.has_answer`` and ``trivial.format_valid`` (:mod:`sarl.evaluation.trivial`, the
  floor a reward's validity is read against), and the batch's counts (``validity_counts/prompts``,
  ``.../prompts_with_pairs``, ``.../pairs``). TRL averages them over the step's scoring
  batches (one per gradient-accumulation micro-step and process).
* ``None``: TRL reads ``None`` as "this reward does not apply to this sample" and leaves it out of
  that sample's reward sum. The adapter returns ``None`` exactly where the reward itself says a
  score is undefined (a NaN score); the structure reward always scores (degenerate maps get
  ``degenerate_score``), so it never yields ``None``. Exceptions propagate: a failed embedder call
  stops the step rather than becoming a reward of 0.
* Other inputs: a dataset column ``ground_truth`` fills ``Sample.ground_truth``; the remaining
  columns are in ``Sample.extra`` (with ``prompt_messages`` for conversational prompts).
  ``trainer_state`` is not used.
* Truncation: TRL does not tell reward functions which completions were cut at
  ``max_completion_length``; it decides it from the token ids, ``ids[-1] not in [*eos_token_ids,
  pad_token_id]`` (``GRPOTrainer._generate_and_score_completions``, the ``clipped_ratio`` metric
  and ``mask_truncated_completions``). Once :func:`bind_trainer` has given the function those stop
  ids, ``Sample.extra["truncated"]`` is that flag for every completion. A reward with
  ``masks_truncated`` (``tag_maxflow``, tagged-reasoning A.7) called without them logs one
  warning and falls back to its own rule (``max_completion_tokens``).
* Policy embeddings (``embedder.kind: policy``, SARL v1 A.1 Implementation A): when the reward's
  embedder is a :class:`~sarl.embedding.policy.PolicyEmbedder`, the batch is scored inside
  :func:`policy_batch`, which embeds every step of every completion from ``completion_ids`` with
  the trainer's policy before the reward asks for the vectors. The policy reaches the embedder
  through :func:`bind_policy` (part of :func:`bind_trainer`), called once after the trainer is
  built (the local runner does; the TRL cluster job does the same with one line after building
  its trainer).
* Vote sets: a group reward whose ``votes_per_prompt`` exceeds ``num_generations`` (TTRL's
  ``n_votes_per_prompt``) scores each group followed by extra responses to its prompt, drawn
  for the vote alone with the trainer's generation (bound by :func:`bind_trainer`); TRL gets
  the scores of the trained completions only, so its groups and advantages are the trained
  group's (:mod:`sarl.integrations.trl_votes`). The logged component means are those of the
  trained completions.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from sarl.embedding.policy import PolicyEmbedder
from sarl.evaluation.trivial import trivial_scores
from sarl.evaluation.validity import correctness_flags, count_metrics, validity
from sarl.integrations.trl_votes import VoteDrawer, trainer_vote_drawer, vote_sets
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.math_answer import response_correct
from sarl.rewards.registry import create_reward
from sarl.tracking.metrics import validity_metric

Message = Mapping[str, Any]
#: A TRL prompt or completion: plain text, or a list of chat messages.
Turn = str | Sequence[Message]
LogMetric = Callable[[str, float], None]

_LOG = logging.getLogger(__name__)

# Keyword arguments TRL adds that are not dataset columns.
_TRL_CONTROL_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})
# Fields in which TRL's response parsing (transformers ``parse_response``) puts the reasoning.
_REASONING_FIELDS = ("reasoning_content", "thinking")


class TRLRewardFunc:
    """A sarl reward as a TRL reward function; ``__name__`` is ``sarl_<reward name>``."""

    def __init__(
        self,
        reward: Reward,
        *,
        num_generations: int | None = None,
        stop_token_ids: Iterable[int] | None = None,
    ) -> None:
        if num_generations is not None and num_generations < 1:
            raise ValueError(f"num_generations: must be >= 1, got {num_generations}")
        votes = reward.votes_per_prompt
        if votes is not None and num_generations is None:
            raise ValueError(
                f"reward {reward.name!r} votes over votes_per_prompt={votes} responses per "
                "prompt: pass num_generations (the trainer's) to size the extra rollouts"
            )
        self.reward = reward
        self.num_generations = num_generations
        #: Extra responses per prompt for the vote (0: the trained group votes alone).
        self.extra_votes = (
            0 if votes is None or num_generations is None else max(votes - num_generations, 0)
        )
        #: Draws them; set by :func:`bind_trainer` (:func:`~.trl_votes.trainer_vote_drawer`).
        self.draw_votes: VoteDrawer | None = None
        #: Ids that end a completion (EOS and pad); set by :func:`bind_trainer`. With them and
        #: ``completion_ids``, ``Sample.extra["truncated"]`` is TRL's truncation flag.
        self.stop_token_ids = None if stop_token_ids is None else frozenset(stop_token_ids)
        self._warned_truncation = False
        # TRL names the reward's metrics (rewards/<name>/mean) after the callable's __name__.
        self.__name__ = f"sarl_{reward.name}"
        self._think_tags = (
            str(getattr(reward.settings, "think_open", "<think>")),
            str(getattr(reward.settings, "think_close", "</think>")),
        )

    def __repr__(self) -> str:
        return f"TRLRewardFunc({self.reward.name!r}, num_generations={self.num_generations})"

    def __call__(
        self,
        prompts: Sequence[Turn],
        completions: Sequence[Turn],
        completion_ids: Sequence[Sequence[int]] | None = None,
        *,
        log_metric: LogMetric | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Score one batch of completions; returns one reward per completion, in order."""
        if len(prompts) != len(completions):
            raise ValueError(
                f"{self.__name__}: got {len(prompts)} prompts for {len(completions)} completions"
            )
        columns = dataset_columns(kwargs, len(completions))
        truncated = self._truncation(completion_ids, len(completions))
        if truncated is not None:
            columns = {**columns, "truncated": truncated}
        samples = [
            _sample(prompts[i], completion_text(completions[i], *self._think_tags), i, columns)
            for i in range(len(completions))
        ]
        spans = group_spans(prompts, self.num_generations)
        groups = [samples[a:b] for a, b in spans]
        scored_groups = self._vote_sets(prompts, spans, groups) if self.extra_votes else groups
        responses = [s.response for s in samples]
        with policy_batch(self.reward, prompts, completion_ids, responses):
            scored = self._score(scored_groups)
        # A vote set's extra responses come after the trained ones; only those are returned.
        outputs = [out for g, group in zip(scored, groups, strict=True) for out in g[: len(group)]]
        if log_metric is not None:
            log_component_means(outputs, self.reward, log_metric)
            log_validity(outputs, samples, spans, self.reward, log_metric)
        return [None if math.isnan(o.score) else float(o.score) for o in outputs]

    def _truncation(
        self, completion_ids: Sequence[Sequence[int]] | None, n: int
    ) -> list[bool] | None:
        """TRL's truncation flag per completion, or None when it cannot be decided here."""
        if self.stop_token_ids is None or completion_ids is None:
            if self.reward.masks_truncated and not self._warned_truncation:
                self._warned_truncation = True
                _LOG.warning(
                    "reward %r masks truncated completions, but %s; it can only use its own "
                    "max_completion_tokens (call sarl.integrations.trl.bind_trainer)",
                    self.reward.name,
                    "no completion_ids were passed"
                    if completion_ids is None
                    else "the trainer's stop token ids are not bound",
                )
            return None
        if len(completion_ids) != n:
            raise ValueError(f"{self.__name__}: got {len(completion_ids)} completion_ids for {n}")
        return [truncated(ids, self.stop_token_ids) for ids in completion_ids]

    def _vote_sets(
        self, prompts: Sequence[Turn], spans: list[tuple[int, int]], groups: list[list[Sample]]
    ) -> list[list[Sample]]:
        """Each group followed by the extra responses its vote needs, all drawn in one call."""
        if self.draw_votes is None:
            raise ValueError(
                f"reward {self.reward.name!r} votes over votes_per_prompt="
                f"{self.reward.votes_per_prompt} responses per prompt, but no trainer draws the "
                "extra ones: call sarl.integrations.trl.bind_trainer after building the trainer"
            )
        size = self.num_generations or 1  # set whenever extra_votes is (__init__)
        return vote_sets(self.draw_votes, prompts, spans, groups, size, self.extra_votes)

    def _score(self, groups: list[list[Sample]]) -> list[list[RewardOutput]]:
        scored = self.reward.score_groups(groups)
        if [len(g) for g in scored] != [len(g) for g in groups]:
            raise RuntimeError(
                f"reward {self.reward.name!r}: score_groups returned groups of sizes "
                f"{[len(g) for g in scored]} for inputs of sizes {[len(g) for g in groups]}"
            )
        return scored

    def close(self) -> None:
        """Release the reward's pools and clients."""
        self.reward.close()


def make_trl_reward(
    name: str = "structure",
    settings: Mapping[str, Any] | BaseModel | None = None,
    *,
    reward: Reward | None = None,
    num_generations: int | None = None,
) -> TRLRewardFunc:
    """Build a TRL reward function from a registered reward name and its settings.

    Pass ``reward`` to wrap an already built reward instead (e.g. a ``StructureReward`` with an
    explicit embedder); ``name`` is then not used and ``settings`` must be None. Set
    ``num_generations`` (the trainer's) for group rewards, so cut groups raise instead of scoring.
    """
    if reward is not None:
        if settings is not None:
            raise ValueError("settings: must be None when an already built reward is passed")
        return TRLRewardFunc(reward, num_generations=num_generations)
    return TRLRewardFunc(create_reward(name, settings), num_generations=num_generations)


def _scorer(reward: Reward | TRLRewardFunc) -> Any:
    # Rewards that embed steps expose their scorer (the structure reward does).
    if isinstance(reward, TRLRewardFunc):
        reward = reward.reward
    return getattr(reward, "scorer", None)


def policy_embedder(reward: Reward | TRLRewardFunc) -> PolicyEmbedder | None:
    """The reward's policy embedder (``embedder.kind: policy``) if it has one; a TRL reward
    function is looked through to its reward."""
    embedder = getattr(_scorer(reward), "embedder", None)
    return embedder if isinstance(embedder, PolicyEmbedder) else None


def bind_policy(rewards: Iterable[Reward | TRLRewardFunc], trainer: Any) -> int:
    """Give every policy embedder among ``rewards`` the trainer's policy; returns how many.

    Call once, after the TRL trainer is built: each batch then embeds with ``trainer.model`` as
    it is at that moment (the weights being trained) and ``trainer.processing_class``.
    Other rewards and functions are skipped, so passing all of a trainer's rewards is fine.
    """
    bound = 0
    for reward in rewards:
        embedder = policy_embedder(reward)
        if embedder is not None:
            embedder.bind_trainer(trainer)
            bound += 1
    return bound


def truncated(ids: Sequence[int], stop_token_ids: frozenset[int]) -> bool:
    """TRL 1.16's rule: a completion whose last token is neither an EOS nor the pad token was
    cut at ``max_completion_length`` (an empty one was not)."""
    return bool(ids) and int(ids[-1]) not in stop_token_ids


def trainer_stop_token_ids(trainer: Any) -> frozenset[int]:
    """The ids TRL's trainer takes as a completion's end: ``trainer.eos_token_ids`` (the
    tokenizer's EOS plus the generation config's) and the tokenizer's pad id."""
    processing = trainer.processing_class
    tokenizer = getattr(processing, "tokenizer", processing)  # a processor wraps its tokenizer
    eos = getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id]
    return frozenset(int(i) for i in [*eos, tokenizer.pad_token_id] if i is not None)


def bind_trainer(rewards: Iterable[Reward | TRLRewardFunc], trainer: Any) -> None:
    """Give the rewards what only the built trainer knows; call once, after building it.

    Policy embedders get the trainer's policy (:func:`bind_policy`), and every
    :class:`TRLRewardFunc` gets the trainer's stop token ids, so each batch's
    ``Sample.extra["truncated"]`` is the flag TRL itself masks with; one whose reward votes over
    more responses than the trained group gets the trainer's generation to draw the extra ones
    (:func:`~sarl.integrations.trl_votes.trainer_vote_drawer`). Other functions are skipped.
    """
    rewards = list(rewards)
    bind_policy(rewards, trainer)
    stop = trainer_stop_token_ids(trainer)
    for reward in rewards:
        if isinstance(reward, TRLRewardFunc):
            reward.stop_token_ids = stop
            if reward.extra_votes:
                reward.draw_votes = trainer_vote_drawer(trainer)


def policy_batch(
    reward: Reward | TRLRewardFunc,
    prompts: Sequence[Turn],
    completion_ids: Sequence[Sequence[int]] | None,
    responses: Sequence[str],
) -> contextlib.AbstractContextManager[None]:
    """Where the reward has a policy embedder: the batch's steps embedded from
    ``completion_ids`` (:meth:`PolicyEmbedder.batch`) for the scoring done inside; otherwise
    nothing. ``responses`` are the texts the reward scores, one per completion."""
    scorer = _scorer(reward)
    embedder = getattr(scorer, "embedder", None)
    if not isinstance(embedder, PolicyEmbedder):
        return contextlib.nullcontext()
    if completion_ids is None:
        raise ValueError(
            "embedder.kind 'policy' needs the completion_ids of the sampled completions; TRL "
            "(>= 1.0) passes them to reward functions, other callers must pass them too"
        )
    return embedder.batch(prompts, completion_ids, responses, scorer.config)


def completion_text(
    completion: Turn, think_open: str = "<think>", think_close: str = "</think>"
) -> str:
    """The text to score of one TRL completion (see the module docstring for the rules)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion):
        if message.get("role") == "assistant":
            return _assistant_text(message, think_open, think_close)
    roles = [m.get("role") for m in completion]
    raise ValueError(f"conversational completion has no assistant message (roles: {roles})")


def _assistant_text(message: Message, think_open: str, think_close: str) -> str:
    content = _content_text(message.get("content"))
    for field in _REASONING_FIELDS:
        reasoning = message.get(field)
        if isinstance(reasoning, str) and reasoning:
            return f"{think_open}{reasoning}{think_close}{content}"
    return content


def _content_text(content: object) -> str:
    # Content is a string, None (tool calls only) or a list of typed parts (multimodal format).
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    raise ValueError(
        f"message content: expected str, list of parts or None, got {type(content).__name__}"
    )


def prompt_text(prompt: Turn) -> str:
    """A plain-text prompt as is; a conversational one as its last user message."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    return _content_text(users[-1].get("content")) if users else ""


def group_spans(
    prompts: Sequence[Turn], num_generations: int | None = None
) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges of the groups in a TRL batch: runs of equal prompts.

    Equal prompts of adjacent dataset rows fall into one group (same prompt, so still siblings).
    With ``num_generations``, every run must be a whole number of groups of that size, else
    ValueError: the batch holds part of a group whose rest went to another process.
    """
    n = len(prompts)
    starts = [i for i in range(n) if i == 0 or prompts[i] != prompts[i - 1]]
    spans = list(zip(starts, [*starts[1:], n], strict=False))  # no starts when n == 0
    if num_generations is None:
        return spans
    for a, b in spans:
        if (b - a) % num_generations:
            raise ValueError(
                f"completions {a}..{b - 1} share a prompt but are not whole groups of "
                f"num_generations={num_generations}; the rest of the group is in another process's "
                "batch, so make the per-process generation batch a multiple of num_generations"
            )
    return spans


def dataset_columns(kwargs: Mapping[str, Any], n: int) -> dict[str, Sequence[Any]]:
    """The dataset columns among TRL's keyword arguments: lists aligned with the batch of ``n``."""
    return {
        key: value
        for key, value in kwargs.items()
        if key not in _TRL_CONTROL_KWARGS and isinstance(value, list) and len(value) == n
    }


def _sample(
    prompt: Turn, response: str, index: int, columns: Mapping[str, Sequence[Any]]
) -> Sample:
    row = {key: values[index] for key, values in columns.items()}
    truth = row.pop("ground_truth", None)
    if not isinstance(prompt, str):
        row["prompt_messages"] = prompt
    return Sample(
        response=response,
        prompt=prompt_text(prompt),
        ground_truth=None if truth is None else str(truth),
        extra=row,
    )


def log_validity(
    outputs: Sequence[RewardOutput],
    samples: Sequence[Sample],
    spans: Sequence[tuple[int, int]],
    reward: Reward,
    log_metric: LogMetric,
) -> None:
    """Send the batch's reward-validity figures (:mod:`sarl.evaluation.validity`) to TRL.

    Only when every sample has a ground truth; a figure undefined for this batch (no correct or
    no incorrect response) is not sent, so TRL's per-step mean is over the batches that define it.
    """
    truths = [s.ground_truth for s in samples]
    correct = correctness_flags([s.response for s in samples], truths, response_correct)
    if correct is None:
        return
    groups = [g for g, (a, b) in enumerate(spans) for _ in range(a, b)]
    # The trivial predictors ride along, so every reward's figures have their floor beside them
    # (sarl.evaluation.trivial). Each reward function of a trainer logs the same values for the
    # same batch; TRL averages a step's values per name, so the repeats change nothing.
    columns = {reward.name: [o.score for o in outputs]}
    columns |= trivial_scores([s.response for s in samples])
    for name, scores in columns.items():
        figures = validity(scores, correct, groups)
        for figure, value in figures.as_metrics().items():
            log_metric(validity_metric(name, figure), value)
    for key, value in count_metrics(figures).items():  # a trivial predictor's: every response
        log_metric(key, value)


def log_component_means(
    outputs: Sequence[RewardOutput], reward: Reward, log_metric: LogMetric
) -> None:
    """Send the NaN-skipping batch mean of each component to TRL as ``<reward>/<component>``."""
    for key in reward.component_keys:
        values = [o.components[key] for o in outputs if not math.isnan(o.components[key])]
        # An all-NaN component is left out: TRL sums raw values, so one NaN would poison the step.
        if values:
            log_metric(f"{reward.name}/{key}", math.fsum(values) / len(values))
