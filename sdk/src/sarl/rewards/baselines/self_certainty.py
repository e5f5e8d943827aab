"""Intuitor's self-certainty (pure numpy) and its registry entry ``"self_certainty"``.

Zhao et al., "Learning to Reason without External Rewards" (Intuitor, 2025, arXiv:2505.19590),
after Kang et al. (2025): the reward of a response ``o`` to ``q`` is the mean, over its tokens,
of the KL divergence from the uniform distribution U over the vocabulary V to the policy's
next-token distribution::

    SC(o | q) = 1/|o| Σ_i KL(U ‖ p(· | q, o_<i))
              = -1/(|o|·|V|) Σ_i Σ_j log(|V| · p(j | q, o_<i))

High values mean confident (peaked) predictions; 0 means uniform ones.

The score needs the policy's logits, which a text-in reward never sees, so the reward that
computes it is the TRL hook ``sarl.integrations.trl_self_certainty.make_self_certainty_reward``
(it recomputes the logits of each completion with the policy). The registered
``"self_certainty"`` entry exists so experiment specs and the CLI can name the baseline; calling
its ``score_groups`` raises an error that points at that hook.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import register_reward


class SelfCertaintyRewardSettings(BaseModel):
    """Settings of the TRL hook (used by ``make_self_certainty_reward``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(
        default=1.0, gt=0, description="Logits are divided by this first (the sampling one)."
    )
    batch_size: int = Field(default=8, ge=1, description="Completions per forward pass.")


def kl_from_uniform(
    logsumexp: npt.ArrayLike, mean_logit: npt.ArrayLike, vocab_size: int
) -> npt.NDArray[np.float64]:
    """Per-token ``KL(U ‖ p_t)`` from the two reductions of each row ``z_t`` of the logits.

    Intuitor's self-certainty term (Zhao et al. 2025, the definition of Self-certainty(o|q)):
    ``KL(U ‖ p) = Σ_j (1/V) log((1/V) / p_j) = -(1/V) Σ_j log(V p_j)``, and with
    ``log p_j = z_j - logsumexp(z)`` this is ``logsumexp(z) - mean(z) - log V``. Taking the two
    reductions as input lets the TRL hook reduce huge ``(tokens, vocab)`` tensors on the device
    and still use this one formula. Clipped at 0 (rounding gives ~-1e-16 for uniform rows).
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    lse = np.asarray(logsumexp, dtype=np.float64)  # (tokens,)
    mean = np.asarray(mean_logit, dtype=np.float64)  # (tokens,)
    kl: npt.NDArray[np.float64] = np.maximum(lse - mean - np.log(vocab_size), 0.0)  # (tokens,)
    return kl


def token_kl_from_uniform(logits: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``KL(U ‖ softmax(z_t))`` for each row ``z_t`` of a ``(tokens, vocab)`` logits array."""
    z = np.asarray(logits, dtype=np.float64)  # (tokens, vocab)
    if z.ndim != 2 or z.shape[1] == 0:
        raise ValueError(f"logits must be a (tokens, vocab) array with vocab >= 1, got {z.shape}")
    top = z.max(axis=1, keepdims=True)  # (tokens, 1): subtracted for a stable logsumexp
    lse = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))  # (tokens,)
    return kl_from_uniform(lse, z.mean(axis=1), z.shape[1])


def self_certainty(logits: npt.ArrayLike) -> float:
    """Intuitor's self-certainty: the mean over completion tokens of ``KL(U ‖ p_t)``.

    ``logits`` is ``(tokens, vocab)``: row t is the policy's logits for the t-th completion token
    given the prompt and the tokens before it. Uniform logits give 0. No token (an empty
    completion) gives NaN: the score is undefined, and the TRL adapter passes NaN on as ``None``.
    """
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 2 and z.shape[0] == 0:
        return float("nan")
    return float(token_kl_from_uniform(z).mean())


def self_certainty_from_reductions(
    logsumexp: npt.ArrayLike, mean_logit: npt.ArrayLike, vocab_size: int
) -> float:
    """:func:`self_certainty` from per-token reductions (``(tokens,)`` each); NaN if no token."""
    kl = kl_from_uniform(logsumexp, mean_logit, vocab_size)
    return float(kl.mean()) if kl.size else float("nan")


class LogitsRequiredError(RuntimeError):
    """Self-certainty was asked of a text-only reward interface."""


@register_reward
class SelfCertaintyReward(Reward):
    """Name-only registry entry: the score needs logits (see the module docstring)."""

    name = "self_certainty"
    Settings = SelfCertaintyRewardSettings

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        raise LogitsRequiredError(
            "reward 'self_certainty' needs the policy's logits, which score_groups (text in) does "
            "not have; it is only available through the TRL adapter: "
            "sarl.integrations.trl_self_certainty.make_self_certainty_reward(model, tokenizer)"
        )
