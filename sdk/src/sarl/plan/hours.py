"""An estimate of a run's steps, hours and GPU-hours, from FLOPs and stated efficiencies.

Called by :mod:`sarl.plan.plan`. A planning figure, not a measurement: the plan prints every
assumption below beside it. FLOPs per token of a dense transformer: 2 x parameters forward,
4 x backward (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1), plus one
more forward where gradient checkpointing recomputes it; attention's own FLOPs are left out
(small beside the weights' at these lengths for a 4B model, and the estimate is coarse anyway).

Per step (``train_batch_size`` prompts, ``rollouts_per_prompt`` trained responses each, a
group reward's larger vote set generated where it votes):

* generation: 2 x params FLOPs per generated token at :data:`GENERATION_MFU`;
* training: the actor's update (2 + 4 + 2 recompute = 8 x params per token), its old
  log-probabilities and the reference's (2 x params each), and for PPO the critic's values and
  update (2 + 8), at :data:`TRAINING_MFU`.

Steps: ``max_steps`` if set, else ``epochs`` x floor(rows / ``train_batch_size``) (verl's
training dataloader drops the last partial batch, ``trainer/main_ppo.py:create_rl_sampler`` /
``StatefulDataLoader(drop_last=True)``); the number of rows is given to the plan (``sarl plan
--train-rows``) or taken from :data:`KNOWN_ROWS` for the datasets ``sarl data prepare`` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Dense bf16 tensor-core peak of one GPU, FLOP/s (NVIDIA H100 SXM datasheet: 989 TFLOPS).
PEAK_FLOPS: Final = 989e12
#: Model FLOPs utilisation of the FSDP2 training passes (assumption).
TRAINING_MFU: Final = 0.30
#: Effective utilisation of vLLM generation, decode-bound (assumption).
GENERATION_MFU: Final = 0.10
#: Mean response length as a share of ``max_response_length`` (assumption).
RESPONSE_SHARE: Final = 0.5
#: Mean prompt length as a share of ``max_prompt_length`` (assumption).
PROMPT_SHARE: Final = 0.25
#: Rows of the training files ``sarl data prepare`` writes (sarl.datasets.sources): the AIME
#: 1983-2024 Kaggle CSV has 933 problems.
KNOWN_ROWS: Final = {"aime": 933}


@dataclass(frozen=True)
class StepShape:
    """What one training step processes."""

    prompts: int
    trained_responses: int  # per prompt
    generated_responses: int  # per prompt (the vote set where a reward votes)
    prompt_tokens: float
    response_tokens: float
    critic: bool


def steps(rows: int | None, batch: int, epochs: int, max_steps: int | None) -> int | None:
    """Training steps, or None when neither ``max_steps`` nor the dataset's rows are known."""
    per_epoch = None if rows is None else rows // batch
    if max_steps is not None:
        return max_steps if per_epoch is None else min(max_steps, per_epoch * epochs)
    return None if per_epoch is None else per_epoch * epochs


def step_seconds(shape: StepShape, params: int, gpus: int) -> float:
    """Wall-clock seconds of one step on ``gpus`` GPUs."""
    generated = shape.prompts * shape.generated_responses * shape.response_tokens
    trained = (
        shape.prompts * shape.trained_responses * (shape.prompt_tokens + shape.response_tokens)
    )
    generation = 2 * params * generated / (PEAK_FLOPS * GENERATION_MFU)
    per_token = 8 + 2 + 2 + (10 if shape.critic else 0)
    training = per_token * params * trained / (PEAK_FLOPS * TRAINING_MFU)
    return (generation + training) / gpus
