"""verl's custom reward function: a per-sample sarl reward behind ``reward.custom_reward_function``.

Called by verl 0.9.1's reward loop; set it up with
:func:`sarl.integrations.verl.overrides.verl_reward_overrides` (``group=False``), i.e.::

    reward.custom_reward_function.path=pkg://sarl.integrations.verl.compute_score
    reward.custom_reward_function.name=compute_score
    ++reward.custom_reward_function.reward_kwargs.reward=structure
    ++reward.custom_reward_function.reward_kwargs.settings.embedder.kind=openai ...

How verl 0.9.1 calls it (paths under ``verl/``):

* ``trainer/ppo/reward.py:get_custom_reward_fn`` sees ``inspect.iscoroutinefunction`` is true and
  wraps it in ``_call_with_kwargs_async``, which *awaits* it with ``reward_kwargs`` merged into the
  keyword arguments. The default ``naive`` manager
  (``experimental/reward_loop/reward_manager/naive.py:run_single``) checks the same and awaits it
  on the reward worker's event loop (sync functions would go to a thread pool instead), passing
  ``data_source``, ``solution_str`` (the response decoded with ``skip_special_tokens=True``),
  ``ground_truth`` (``reward_model["ground_truth"]``) and ``extra_info`` (the dataset's plus
  ``num_turns`` and ``rollout_reward_scores``); with a reward model also
  ``reward_router_address`` and ``reward_model_tokenizer`` (ignored here).
* One call per response, many concurrently: ``experimental/reward_loop/reward_loop.py:
  RewardLoopWorker.compute_score_batch`` gathers one task per sample, and during rollout each
  finished response is sent on its own (``experimental/agent_loop/agent_loop.py:_compute_score``).
  Calls are therefore micro-batched (:class:`~sarl.integrations.verl.batcher.RewardBatcher`):
  ``max_batch_samples`` responses or ``max_wait_ms`` after the first, in one ``ascore_groups``
  call, so the embedder gets one request for all their steps.
* The returned dict: ``score`` becomes the reward, placed by verl at the last valid response
  token; *every* key (``score`` included) becomes ``reward_extra_info``, which verl stacks with
  ``np.array([info[key] for info in infos])`` using the keys of the first sample, so every call
  returns the same keys: ``score``, the reward's ``component_keys``, ``reward_failed`` and
  ``answer_correct`` (1.0 / 0.0 against the row's ground truth, ``None`` without one or after a
  failure; read by the reward-validity metrics, :mod:`sarl.integrations.verl.validity`, and
  averaged by verl's validation metrics into an accuracy), and the trivial predictors
  ``trivial.has_answer`` / ``trivial.format_valid`` (1.0 / 0.0, ``None`` likewise), measured
  beside every reward there.
* Several reward terms (the ``terms`` option, see :mod:`sarl.integrations.verl.terms`): ``score``
  is ``sum(weight * term)`` and the components are every term's score as ``reward/<name>`` and
  its components as ``<name>/<component>``, weight-0 terms included: the names the local runner
  and the TRL adapter log. Where verl 0.9.1 shows extra info: validation metrics
  (``val-aux/<data_source>/<key>/mean@<n>``, ``trainer/ppo/metric_utils.py:
  process_validation_metrics``), the training batch's ``non_tensor_batch`` (legacy trainer,
  ``trainer/ppo/ray_trainer.py:fit``) or the sample's ``extra_fields`` (v1 trainer,
  ``trainer/ppo/v1/agent_loop_tq.py``); its training metrics (``metric_utils.py:
  compute_data_metrics``) summarize only the summed score (``critic/score/*``).

Undefined components (the structure reward's ``path_length`` of a map with < 2 nodes, NaN in
``RewardOutput.components``) are returned as ``None``: verl's validation metrics
(``trainer/ppo/metric_utils.py:process_validation_metrics``) drop ``None`` values but average the
rest with ``np.mean``, so one NaN would turn a metric into NaN, and a stand-in number would bias it.

Errors: a scoring failure or a call exceeding ``timeout_s`` raises :class:`RewardScoringError`
naming the reward (default), or, with ``on_error=<score>``, returns that score with
``reward_failed=1.0`` and logs a warning. Never a silent 0. What a raise does in verl 0.9.1: in the
default v1 trainer the prompt's group is marked failed (``trainer/ppo/v1/agent_loop_tq.py:
_run_prompt``) and handled by the replay buffer's failure policy; in the legacy trainer the step
fails. Configuration errors (unknown reward, bad settings or options) always raise.

Group rewards cannot run here (verl passes no ``uid``); use ``SarlRewardManager``. One reward per
process per (name, settings), built on first call and shared
(:data:`~sarl.integrations.verl.batcher.SHARED`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from sarl.evaluation.trivial import TRIVIAL, trivial_scores
from sarl.integrations.verl.batcher import SHARED
from sarl.integrations.verl.overrides import ScoreOptions, parse_score_options
from sarl.integrations.verl.terms import WeightedRewards
from sarl.integrations.verl.validity import ANSWER_CORRECT_KEY
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.math_answer import response_correct
from sarl.rewards.registry import RewardConfigError

logger = logging.getLogger(__name__)

#: Extra-info key: 1.0 where the ``on_error`` fallback score was used, else 0.0.
FAILED_KEY = "reward_failed"
# Keyword arguments verl's managers add when a reward model is configured (naive.py, dapo.py).
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

VerlResult = dict[str, float | None]
T = TypeVar("T")


class RewardScoringError(RuntimeError):
    """Scoring a sample failed or timed out and no ``on_error`` score is configured."""


async def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> VerlResult:
    """Score one response with the reward named in ``kwargs`` (verl's ``reward_kwargs``).

    ``kwargs``: :class:`~sarl.integrations.verl.overrides.ScoreOptions` fields (``reward``,
    ``settings``, ``timeout_s``, ``on_error``, ``max_batch_samples``, ``max_wait_ms``); unknown
    keys raise :class:`RewardConfigError`. Returns ``{"score", *component_keys, "reward_failed",
    "answer_correct"}``.
    """
    options = parse_score_options({k: v for k, v in kwargs.items() if k not in _VERL_KWARGS})
    reward = await shared_reward(options)
    if reward.needs_group:
        raise RewardConfigError(
            f"reward {label(reward)!r} needs whole groups, but verl's custom reward function sees "
            "one response at a time; use SarlRewardManager (verl_reward_overrides(group=True))"
        )
    sample = make_sample(
        solution_str, data_source=data_source, ground_truth=ground_truth, extra_info=extra_info
    )
    batcher = SHARED.batcher(
        reward,
        max_batch_samples=options.max_batch_samples,
        max_wait_s=options.max_wait_ms / 1000.0,
    )
    try:
        output = await bounded(batcher.score_sample(sample), options.timeout_s)
        return verl_result(output, reward, sample)
    except Exception as e:
        return on_failure(e, reward, options, f"data_source={data_source!r}")


def compute_score_sync(
    data_source: Any,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> VerlResult:
    """Blocking twin of :func:`compute_score` for callers without an event loop.

    verl 0.9.1 does not need it (its reward loop awaits :func:`compute_score`); it serves scripts
    and sync reward managers such as the legacy ``verl/workers/reward_manager/*``, which 0.9.1's
    trainer no longer uses. Each call runs on its own event loop, so sync calls are not
    micro-batched (the batching window is set to 0). Raises ``RuntimeError`` inside a running loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        kwargs = {**kwargs, "max_wait_ms": 0.0}
        return asyncio.run(
            compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
        )
    raise RuntimeError(
        "compute_score_sync: called inside a running event loop; await compute_score"
    )


async def shared_reward(options: ScoreOptions) -> Reward:
    """The process's reward for these options (the weighted sum of ``terms`` when given); a
    first build runs off the event loop."""
    if options.terms is not None:
        terms = [(t.reward, t.weight, t.settings) for t in options.terms]
        cached = SHARED.cached_combined(terms)
        if cached is not None:
            return cached
        return await asyncio.to_thread(SHARED.combined, terms)
    cached = SHARED.cached(options.reward, options.settings)
    if cached is not None:
        return cached
    return await asyncio.to_thread(SHARED.reward, options.reward, options.settings)


def label(reward: Reward) -> str:
    """How messages name ``reward``: its name, or a weighted sum's terms and weights."""
    return reward.label if isinstance(reward, WeightedRewards) else reward.name


async def bounded(scoring: Awaitable[T], timeout_s: float) -> T:
    """Await ``scoring`` for at most ``timeout_s``; the ``TimeoutError`` then names the limit."""
    try:
        async with asyncio.timeout(timeout_s) as deadline:
            return await scoring
    except TimeoutError as e:
        if not deadline.expired():  # raised by the reward itself: keep its message
            raise
        raise TimeoutError(f"did not finish within timeout_s={timeout_s:g} s") from e


def make_sample(
    response: str,
    *,
    prompt: str = "",
    data_source: Any = None,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
) -> Sample:
    """A :class:`Sample` from what verl has about one response.

    ``extra`` holds verl's ``extra_info`` plus ``data_source``; a ground truth that is not a string
    (numbers, lists) is given as ``str(...)`` and kept unchanged in ``extra["ground_truth"]``.
    """
    extra: dict[str, Any] = {**(extra_info or {}), "data_source": data_source}
    if ground_truth is not None and not isinstance(ground_truth, str):
        extra["ground_truth"] = ground_truth
        ground_truth = str(ground_truth)
    return Sample(response=response, prompt=prompt, ground_truth=ground_truth, extra=extra)


def answer_correct(sample: Sample | None) -> float | None:
    """1.0 / 0.0: the response's boxed answer against the sample's ground truth; None without
    one. Extra info for the reward-validity metrics (:mod:`sarl.integrations.verl.validity`)."""
    if sample is None or sample.ground_truth is None:
        return None
    return float(response_correct(sample.response, sample.ground_truth))


def verl_result(output: RewardOutput, reward: Reward, sample: Sample | None = None) -> VerlResult:
    """verl's result dict for one output; raises ``ValueError`` on a non-finite score or missing
    component (a NaN score would reach verl's token-level rewards)."""
    if not math.isfinite(output.score):
        hint = (
            " (a masked truncated completion: verl cannot leave a sample out, so give the reward "
            "a numeric truncated_score)"
            if reward.masks_truncated
            else ""
        )
        raise ValueError(f"reward returned a non-finite score {output.score!r}{hint}")
    missing = [k for k in reward.component_keys if k not in output.components]
    if missing:
        raise ValueError(f"reward output lacks components {missing}")
    result: VerlResult = {"score": float(output.score)}
    for key in reward.component_keys:
        value = float(output.components[key])
        result[key] = value if math.isfinite(value) else None
    result[FAILED_KEY] = 0.0
    result[ANSWER_CORRECT_KEY] = answer_correct(sample)
    result.update(trivial_result(sample))
    return result


def trivial_result(sample: Sample | None) -> dict[str, float | None]:
    """The trivial predictors of correctness (:mod:`sarl.evaluation.trivial`) for the
    reward-validity metrics; None without a ground truth (no validity is measured then)."""
    if sample is None or sample.ground_truth is None:
        return dict.fromkeys(TRIVIAL)
    return {name: values[0] for name, values in trivial_scores([sample.response]).items()}


def failed_result(score: float, reward: Reward) -> VerlResult:
    """The fallback result: ``score``, every component ``None``, ``reward_failed=1.0``, no
    correctness (a failed sample is left out of the validity figures' batch)."""
    result: VerlResult = {"score": float(score)}
    result.update({key: None for key in reward.component_keys})
    result[FAILED_KEY] = 1.0
    result[ANSWER_CORRECT_KEY] = None
    result.update(trivial_result(None))
    return result


def on_failure(error: Exception, reward: Reward, options: ScoreOptions, context: str) -> VerlResult:
    """Apply the error policy: raise :class:`RewardScoringError` or return the fallback result."""
    message = f"sarl reward {label(reward)!r} ({context}): {type(error).__name__}: {error}"
    if options.on_error is None:
        raise RewardScoringError(
            f"{message}; set on_error=<score> in the reward kwargs to score such samples instead"
        ) from error
    logger.warning("%s; scored %s (on_error)", message, options.on_error, exc_info=error)
    return failed_result(options.on_error, reward)
