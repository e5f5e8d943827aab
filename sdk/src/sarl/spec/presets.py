"""Named presets: partial Experiment specs applied *under* a user's spec (user fields win).

Called by ``ExperimentSpec`` validation (``spec.preset``) and ``sarl presets``. The ``paper-*``
presets reproduce SARL v2 Tables 6 (PPO) and 7 (GRPO) for the math and open-ended settings; the
``local-*`` presets are CPU-sized versions of the same recipe for the embedded default.
"""

from __future__ import annotations

import copy
from typing import Any

from sarl.spec.suggest import FieldError, did_you_mean

# An empty url: on a cluster the operator serves the model itself (InferenceService
# <name>-embedding, vLLM on KServe's Hugging Face runtime) and fills in its URL. To use the
# sarl-inference chart's embedding service instead, restate the reward with its URL and served
# model name (docs/how-to/embedder-and-judge.md, "Embeddings from the sarl-inference chart").
_PAPER_EMBEDDER = {
    "kind": "openai",
    "model": "Qwen/Qwen3-Embedding-0.6B",
    "url": "",
}

# KMeans restarts (best inertia wins) of the math presets' structure reward. The paper gives only
# k ≈ sqrt(M) and calls KMeans "stable and reproducible across runs" (A.1); one KMeans++ seeding
# is not, at paper scale. tests/bench/bench_kmeans_restarts.py (`make bench`; figures of its
# --full run, 200 responses x 50 seeds per noise level) on 60-step, 1024-d responses around 8 true
# functions, per-dimension noise 0.02-0.05: the true partition comes back in 68/51/36/25% of
# reseedings with n_init 1, 96/86/72/56% with 3, 100/99/97/91% with 10; SR's standard deviation
# over seeds, 0.022-0.033 with 1 (range 0.11-0.16; SR's spread between responses is ~0.045), is
# 0.0001-0.008 with 10. Cost, one core, M 50-70: 0.6-0.8 ms/response with 1, 1.7-1.9 with 10,
# so ~2.3 s more CPU per 256 x 8-rollout step, split over the reward's workers: nothing beside
# generation. Restarts cannot settle responses without clear functions: on 60-step responses of
# real step texts (bundled MiniLM) SR's sd over seeds stays ~0.057 at 1, 3 and 10 (docs/concepts/
# rewards.md, "Conventions chosen where the paper is silent").
PAPER_KMEANS_N_INIT = 10

# Shared by Tables 6 and 7 (rows equal in both settings and both algorithms).
_PAPER_COMMON: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-4B", "dtype": "bfloat16"},
    "algorithm": {
        "rollouts_per_prompt": 8,
        "train_batch_size": 256,
        "mini_batch_size": 256,
        "micro_batch_size_per_gpu": 32,
        # verl's dynamic batch instead of 32 responses per pass: 32 x 9,216 tokens of logits
        # over Qwen3's 151,936-token vocabulary need ~250 GiB per GPU (`sarl plan`). 24,576
        # tokens per GPU is the budget of verl's own Qwen3-8B DAPO recipe (examples/, ~24k);
        # the plan puts the update at ~42 GiB (GRPO) / ~50 GiB (PPO) of an H100-80GB.
        "max_tokens_per_gpu": 24576,
        "learning_rate": 1e-6,
        "max_prompt_length": 1024,
        "kl_coef": 0.001,
        "kl_type": "low_var_kl",
        "entropy_coef": 0.0,
    },
    "data": {
        "shuffle": False,
        "prompt_template": "{question} Let's think step by step and output the final "
        "answer within \\boxed{{}}.",
    },
    "evaluation": {"every_n_steps": 5, "benchmarks": ["aime25", "amc23", "math500", "minerva"]},
    "storage": {"every_n_steps": 20},
    # One 8-GPU node (A100/H100 nodes have 96-208 vCPUs and 1-2 TiB): requests equal to limits,
    # within any of them. Scratch (checkpoints, caches) is set per algorithm below.
    "resources": {
        "nodes": 1,
        "gpus_per_node": 8,
        "cpu": "64",
        "memory": "512Gi",
        # One GPU, vLLM on Qwen3-4B: the HF weights (~8 GB) and the runtime's caches.
        "evaluation": {"cpu": "8", "memory": "64Gi", "scratch_size": "64Gi"},
    },
}

_SETTINGS: dict[str, dict[str, Any]] = {
    "math": {
        "data": {"task": "dataset", "dataset": "train/aime.parquet"},
        "algorithm": {"max_response_length": 8192, "epochs": 15},
        "reward": [
            {
                "name": "structure",
                "settings": {
                    "clustering": "kmeans",
                    "kmeans_n_init": PAPER_KMEANS_N_INIT,
                    "embedder": _PAPER_EMBEDDER,
                },
            }
        ],
    },
    "open-ended": {
        "data": {
            "task": "dataset",
            "dataset": "train/openrubrics.parquet",
            "question_field": "instruction",
            "answer_field": "instruction",
            "prompt_template": "{question}",
        },
        "algorithm": {"max_response_length": 4096, "epochs": 5},
        "evaluation": {"benchmarks": ["wildbench"]},
        "reward": [
            {
                "name": "structure",
                "settings": {"clustering": "hdbscan", "embedder": _PAPER_EMBEDDER},
            }
        ],
    },
}

_ALGORITHMS: dict[str, dict[str, Any]] = {
    # Table 6: PPO with GAE and a critic. Scratch: 3 actor checkpoints of Qwen3-4B (~60 GB each:
    # fp32 shards 16 GB, Adam state 32 GB, HF weights 8-16 GB), 3 critic checkpoints (~48 GB
    # each), the policy download (~8 GB), Ray's spill and compile caches (~30 GB): ~370 GB.
    "ppo": {
        "algorithm": {"name": "ppo", "critic_learning_rate": 1e-5},
        "resources": {"scratch_size": "400Gi"},
    },
    # Table 7: GRPO. Scratch: the actor's 3 checkpoints, download and caches: ~220 GB.
    "grpo": {"algorithm": {"name": "grpo"}, "resources": {"scratch_size": "256Gi"}},
}

_LOCAL: dict[str, Any] = {
    # Sized for a 2-core CPU (about 1-2 minutes a run after a ~30 s warm start shared by every
    # run of a Study) and calibrated so that RL visibly works (docs/getting-started/
    # local-study.md, "What the local Study shows"):
    # - task: two-operation arithmetic over 1..9 (a fact table a tiny model can learn);
    # - policy: warm-started by SFT on structured traces at their natural length (median ~80
    #   tokens, capped at 160) while RL may write only 80: about half of the warm-started
    #   responses run out of budget before their boxed answer. The optional steps (goal, plan,
    #   checks, reflection, summary) are what a policy can drop to finish in time; GRPO on the
    #   ground-truth reward has to learn that, the structure reward has its own preferences;
    # - GRPO with 8 prompts x 8 rollouts per step, so most groups have reward variance;
    # - held-out evaluation on 128 problems never trained on, before any update and every 32
    #   steps, k=4 samples at temperature 0.6 within the same 80-token budget.
    "model": {
        "name": "builtin:tiny-qwen",
        "warm_start": {"steps": 1000, "max_response_tokens": 160},
    },
    "data": {"train_size": 512, "eval_size": 128, "difficulty": 2},
    "algorithm": {
        "rollouts_per_prompt": 8,
        "train_batch_size": 8,
        "mini_batch_size": 8,
        "micro_batch_size_per_gpu": 16,
        "learning_rate": 1e-4,
        "kl_coef": 0.001,
        "max_prompt_length": 64,
        "max_response_length": 80,
        "epochs": 1,
        "max_steps": 64,
        "temperature": 1.0,
    },
    "evaluation": {"k": 4, "every_n_steps": 32, "max_problems": 128},
    "tracking": {"log_maps_every_n_steps": 32},
    "storage": {"every_n_steps": 32},
    "reward": [{"name": "structure", "settings": {"embedder": {"kind": "local"}, "workers": 1}}],
    # Ignored by local runs; on a cluster (e.g. kind) the built-in model's pods fit a small node.
    "resources": {
        "cpu": "1",
        "memory": "4Gi",
        "scratch_size": "10Gi",
        "evaluation": {"cpu": "1", "memory": "4Gi", "scratch_size": "10Gi"},
    },
}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``; nested dicts merge, everything else (lists) replaces."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _paper(algorithm: str, setting: str) -> dict[str, Any]:
    return deep_merge(deep_merge(_PAPER_COMMON, _SETTINGS[setting]), _ALGORITHMS[algorithm])


PRESETS: dict[str, dict[str, Any]] = {
    "paper-ppo-math": _paper("ppo", "math"),
    "paper-ppo-open-ended": _paper("ppo", "open-ended"),
    "paper-grpo-math": _paper("grpo", "math"),
    "paper-grpo-open-ended": _paper("grpo", "open-ended"),
    "local-grpo-arithmetic": deep_merge(_LOCAL, {"data": {"task": "arithmetic"}}),
    "local-rloo-countdown": deep_merge(
        _LOCAL, {"algorithm": {"name": "rloo"}, "data": {"task": "countdown"}}
    ),
}


#: One line per preset, as ``sarl presets`` lists them.
DESCRIPTIONS: dict[str, str] = {
    "paper-ppo-math": "SARL v2 Table 6: PPO (critic, verl) on Qwen3-4B, math, structure "
    "reward (KMeans); one 8-GPU node.",
    "paper-ppo-open-ended": "SARL v2 Table 6: PPO (critic, verl) on Qwen3-4B, open-ended "
    "(OpenRubrics), structure reward (HDBSCAN); one 8-GPU node.",
    "paper-grpo-math": "SARL v2 Table 7: GRPO on Qwen3-4B, math, structure reward (KMeans); "
    "one 8-GPU node.",
    "paper-grpo-open-ended": "SARL v2 Table 7: GRPO on Qwen3-4B, open-ended (OpenRubrics), "
    "structure reward (HDBSCAN); one 8-GPU node.",
    "local-grpo-arithmetic": "CPU: GRPO on the built-in tiny Qwen, two-operation arithmetic, "
    "structure reward; about 2 minutes a run.",
    "local-rloo-countdown": "CPU: RLOO on the built-in tiny Qwen, Countdown, structure reward.",
}


def preset(name: str) -> dict[str, Any]:
    """A copy of the named preset; a :class:`~sarl.spec.suggest.FieldError` naming
    ``preset``, with the closest name and the known ones, otherwise."""
    if name not in PRESETS:
        known = sorted(PRESETS)
        hint = did_you_mean(name, known) or f"known: {', '.join(known)} (see `sarl presets`)"
        raise FieldError(("preset",), name, f"unknown preset; {hint}")
    return copy.deepcopy(PRESETS[name])
