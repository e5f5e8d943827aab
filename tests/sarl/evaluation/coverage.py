"""How often the bootstrap-over-prompts interval of the within-prompt AUROC covers the truth,
by number of prompts: the measurement behind ``sarl.evaluation.validity.MIN_PROMPTS``.

Not a test (it takes about a minute); run ``.venv/bin/python -m tests.sarl.evaluation.coverage``.
Simulated prompts, G = 8 responses each: a prompt's difficulty d ~ U(0, 1) sets P(correct) =
1 - d; a reward scores a response N(mu, 1) with mu = the prompt's own signal s ~ U(-0.5, 1.5)
when correct and 0 when not (prompts differ in how well the reward separates them, the case
where resampling prompts matters). The truth is the within-prompt AUROC over 20,000 prompts.
"""

from __future__ import annotations

import random

from sarl.evaluation.validity import validity
from sarl.evaluation.validity_bootstrap import bootstrap_intervals, draw_counts

G = 8


def batch(rng: random.Random, prompts: int) -> tuple[list[float], list[bool], list[int]]:
    scores: list[float] = []
    correct: list[bool] = []
    groups: list[int] = []
    for p in range(prompts):
        difficulty, signal = rng.random(), rng.uniform(-0.5, 1.5)
        for _ in range(G):
            c = rng.random() > difficulty
            scores.append(rng.gauss(signal if c else 0.0, 1.0))
            correct.append(c)
            groups.append(p)
    return scores, correct, groups


def coverage(prompts: int, truth: float, reps: int, seed: int) -> tuple[float, float]:
    """(share of intervals that cover ``truth``, mean prompts with pairs) over ``reps``."""
    rng = random.Random(seed)
    hits = mixed = 0
    for rep in range(reps):
        scores, correct, groups = batch(rng, prompts)
        mixed += validity(scores, correct, groups).mixed_prompts
        draws = draw_counts(groups, resamples=400, seed=rep)
        interval = bootstrap_intervals(scores, correct, draws).get("pair_auroc")
        hits += interval is not None and interval[0] <= truth <= interval[1]  # none: a miss
    return hits / reps, mixed / reps


def main() -> None:
    truth = validity(*batch(random.Random(12345), 20_000)).pair_auroc
    assert truth is not None
    print(f"true within-prompt AUROC {truth:.4f}; 95 % intervals, 400 resamples")
    for prompts in (2, 5, 10, 20, 40, 80):
        share, mixed = coverage(prompts, truth, 1000, prompts)
        print(f"{prompts:3d} prompts ({mixed:.1f} with pairs): coverage {share:.3f}")


if __name__ == "__main__":
    main()
