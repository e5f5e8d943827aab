"""Vote sets on TRL: the extra rollouts a group reward votes with, beyond the trained group.

Called by :class:`sarl.integrations.trl.TRLRewardFunc` for a reward whose ``votes_per_prompt``
(TTRL's ``n_votes_per_prompt``, :mod:`sarl.rewards.baselines.ttrl`) exceeds the trainer's
``num_generations``; :func:`sarl.integrations.trl.bind_trainer` binds the trainer's generation
(:func:`trainer_vote_drawer`) once the trainer is built.

Why the reward function draws them. TTRL's reference (PRIME-RL/TTRL at 3e2cc93,
``verl/verl/trainer/ppo/ray_trainer.py``) generates the whole vote set, scores it, and keeps
``n_samples_per_prompt`` responses per prompt *before* computing advantages, so the advantages are
those of the trained group. TRL 1.16 computes rewards and advantages in one method
(``GRPOTrainer._generate_and_score_completions``: group mean and std over ``num_generations``
consecutive completions) and splits that batch into its optimizer steps, so generating the vote set
as ``num_generations`` and dropping completions afterwards would mean redoing its advantages and
batch sizes. Drawing the extra responses here, inside the reward call, leaves TRL's batch, groups
and advantages exactly the trained group's, and the vote sees responses of the same policy at the
same step.

How they are drawn (TRL 1.16, ``trl/trainer/grpo_trainer.py`` and ``rloo_trainer.py``): with the
trainer's own ``_tokenize_prompts`` and ``_generate_single_turn``, i.e. its generation backend
(transformers ``generate``, continuous batching or vLLM), its generation config (temperature,
top-p/k, ``max_completion_length``, ``generation_kwargs``) and its model as it is at this step.
Each prompt goes in as whole groups of ``num_generations`` copies, the shape TRL's vLLM server mode
needs (it generates ``n=num_generations`` completions for every ``num_generations``-th prompt);
extras that are not a multiple of ``num_generations`` are cut from the last group, and that surplus
is generated for nothing. Completions are decoded with ``skip_special_tokens``, as TRL decodes
plain-text completions. Reward functions run on every process with batches of equal size, so every
process draws in step, which the backends' collective calls need. Tool calls, environments and a
custom ``rollout_func`` would not run for these responses: binding refuses such a trainer.

Cost: the trainer generates ``votes_per_prompt / num_generations`` times as many completions per
step (the extra ones in a second generation call, without gradients or log-probabilities).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sarl.rewards.base import Sample

#: ``Sample.extra`` key set on the responses drawn for the vote alone (never trained on).
VOTE_ONLY = "vote_only"

Turn = str | Sequence[Mapping[str, Any]]
#: ``draw(prompts, n)``: ``n`` fresh completion texts for each prompt, in order.
VoteDrawer = Callable[[Sequence[Turn], int], list[list[str]]]


def trainer_vote_drawer(trainer: Any) -> VoteDrawer:
    """A :data:`VoteDrawer` that samples with ``trainer`` (a TRL 1.16 ``GRPOTrainer`` or
    ``RLOOTrainer``); ValueError for a trainer whose completions are not one plain generation."""
    for attr in ("tools", "environment_factories", "rollout_func"):
        if getattr(trainer, attr, None):
            raise ValueError(
                f"votes_per_prompt: the trainer has {attr}, which the extra rollouts drawn for "
                "the vote would skip; vote within the trained group (leave votes_per_prompt "
                "out) with tool or environment rollouts"
            )
    generate = trainer._generate_single_turn
    # GRPO takes the group size as an argument (vLLM server mode needs it); RLOO reads its own.
    takes_group = "num_generations" in inspect.signature(generate).parameters

    def draw(prompts: Sequence[Turn], n: int) -> list[list[str]]:
        if n < 1 or not prompts:
            return [[] for _ in prompts]
        training = bool(getattr(trainer.model, "training", True))
        group = trainer.num_generations if training else trainer.num_generations_eval
        per_prompt = -(-n // group) * group  # whole groups (see the module docstring)
        batch = [prompt for prompt in prompts for _ in range(per_prompt)]
        prompt_ids, images, fields = trainer._tokenize_prompts(batch)
        args = (prompt_ids, images, fields, group) if takes_group else (prompt_ids, images, fields)
        out = generate(*args)
        ids = out[0] if isinstance(out, tuple) else out  # GRPO: (ids, logprobs); RLOO: ids
        texts = trainer.processing_class.batch_decode(ids, skip_special_tokens=True)
        return [list(texts[i * per_prompt : i * per_prompt + n]) for i in range(len(prompts))]

    return draw


def vote_set(group: Sequence[Sample], extra: Sequence[str]) -> list[Sample]:
    """The trained ``group`` followed by the ``extra`` responses to its prompt, which carry the
    group's prompt, ground truth and columns (no truncation flag: their ids are not kept) and
    ``extra["vote_only"] = True``."""
    if not extra:
        return list(group)
    first = group[0]
    columns = {k: v for k, v in first.extra.items() if k != "truncated"}
    columns[VOTE_ONLY] = True
    votes = [Sample(text, first.prompt, first.ground_truth, columns) for text in extra]
    return [*group, *votes]


def vote_sets(
    draw: VoteDrawer,
    prompts: Sequence[Turn],
    spans: Sequence[tuple[int, int]],
    groups: Sequence[Sequence[Sample]],
    num_generations: int,
    extra: int,
) -> list[list[Sample]]:
    """Each group (the batch's ``spans``) followed by ``extra`` responses per prompt, drawn in
    one ``draw`` call. A run of equal prompts longer than ``num_generations`` (adjacent dataset
    rows with one prompt) holds several prompts' groups, and each gets its own extra votes."""
    blocks = [(b - a) // num_generations for a, b in spans]
    drawn = draw(
        [prompts[a] for (a, _), k in zip(spans, blocks, strict=True) for _ in range(k)], extra
    )
    out: list[list[Sample]] = []
    for group, k in zip(groups, blocks, strict=True):
        texts, drawn = drawn[:k], drawn[k:]
        out.append(vote_set(group, [text for block in texts for text in block]))
    return out
