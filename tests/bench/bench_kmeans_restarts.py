"""Benchmark: how much SR depends on KMeans seeding, and what restarts cost (issue 23 item 3).

Run by ``make bench`` (through ``run_all.py``) or alone (``python
tests/bench/bench_kmeans_restarts.py [--full]``); not collected by pytest. It is the measurement
behind the ``paper-*-math`` presets' ``kmeans_n_init`` (``sarl.spec.presets``). For each
``kmeans_n_init`` in :data:`N_INITS`, every response is clustered under :data:`SEEDS` values of
``StructureRewardConfig.seed`` through the production code (``kmeans_bucket`` + ``score_labels``):

* **synthetic, paper scale**: 60 steps, 1024-d (Qwen3-Embedding-0.6B's width), 8 true functions
  (k = round(sqrt(60)) = 8); a step is its function's unit direction plus Gaussian noise of
  ``noise`` per dimension, so it sits ~``noise * 32`` from its direction while directions are
  ~1.41 apart (cosine of two steps of one function ~1 / (1 + 1024 noise^2): 0.71, 0.52, 0.38,
  0.28 at noise 0.02-0.05). The true partition is known: ``recovered`` is the share of
  (response, seed) runs that return it, ``SR = true`` the share whose SR equals SR of the true
  partition, ``worse`` the share that end at a higher inertia than the true partition (a seeding
  failure, not a modelling one);
* **real step texts** embedded by the bundled all-MiniLM-L6-v2 (384-d): the bundled sample
  traces with >= 6 steps alone (M 6-18), and paper-scale responses of 60 steps made of whole
  structured traces of the generated tasks and the sample traces one after another (no 60-step
  model-written trace is bundled; these are real step strings of the kinds the platform scores).
  No truth: ``best found`` is the share of runs that reach the lowest inertia any run found;
* **spread**: per response, the standard deviation and the range (max - min) of SR over the
  seeds, averaged over responses; ``seed-dependent`` is the share of responses whose SR changes
  with the seed. ``SR sd between responses`` (of the best-inertia SR) is the signal a
  group-relative advantage sees, for scale;
* **cost**: ms per response of ``score_embeddings_batch`` at paper scale (M 50-70, 1024-d,
  noise 0.03; the bucketed production path), one core, best of three, same run.

Timings are for this machine, never asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

N_INITS = (1, 3, 10)
SEEDS = 20
NOISES = (0.02, 0.03, 0.04, 0.05)
STEPS, CLUSTERS, DIM = 60, 8, 1024
# Relative tolerance for "same inertia": the Gram matrix is computed from float32 rows.
_INERTIA_RTOL = 1e-6

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def synthetic_responses(
    n: int, *, noise: float, seed: int, steps: int = STEPS, clusters: int = CLUSTERS
) -> tuple[list[npt.NDArray[np.float32]], IntArray]:
    """``n`` responses (steps, DIM) around ``clusters`` random unit directions, and their true
    canonical labels (n, steps). Every function is visited at least once."""
    from sarl.rewards.structure.clustering import canonical_labels

    rng = np.random.default_rng(seed)
    xs, truth = [], []
    for _ in range(n):
        centers = rng.normal(size=(clusters, DIM))
        centers /= np.linalg.norm(centers, axis=1, keepdims=True)
        walk = np.concatenate(
            [rng.permutation(clusters), rng.integers(0, clusters, size=steps - clusters)]
        )
        rng.shuffle(walk)
        xs.append((centers[walk] + noise * rng.normal(size=(steps, DIM))).astype(np.float32))
        truth.append(canonical_labels(walk))
    return xs, np.stack(truth)


def real_step_texts(n_long: int, *, steps: int = STEPS, seed: int = 0) -> list[list[str]]:
    """Step texts, split by the production segmentation: the bundled sample traces with >= 6
    steps, then ``n_long`` responses of exactly ``steps`` steps made of whole traces."""
    from sarl.rewards.structure.config import StructureRewardConfig
    from sarl.rewards.structure.segmentation import extract_steps
    from sarl.tasks.generators import arithmetic, countdown
    from sarl.tasks.traces import structured_trace

    cfg = StructureRewardConfig()
    text = resources.files("sarl.data").joinpath("sample_traces.jsonl").read_text("utf-8")
    samples = [json.loads(line)["response"] for line in text.splitlines() if line.strip()]
    sample_steps = [list(extract_steps(r, cfg).texts) for r in samples]
    rng = random.Random(seed)
    problems = [
        *arithmetic(n_long * 4, seed=seed, difficulty=8),
        *countdown(n_long * 4, seed=seed, difficulty=5),
    ]
    task_steps = [list(extract_steps(structured_trace(p, rng), cfg).texts) for p in problems]
    pool = [s for s in sample_steps if len(s) >= 2] + task_steps
    out = [s for s in sample_steps if len(s) >= 6]
    for _ in range(n_long):
        texts: list[str] = []
        while len(texts) < steps:
            texts += rng.choice(pool)
        out.append(texts[:steps])
    return out


def inertia(x: npt.NDArray[np.floating], labels: Sequence[int]) -> float:
    """KMeans objective of ``labels`` on the unit-normalised rows of ``x``."""
    u = np.asarray(x, dtype=np.float64)
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    lab = np.asarray(labels)
    return float(sum(((u[lab == c] - u[lab == c].mean(0)) ** 2).sum() for c in np.unique(lab)))


def reseed(
    stack: Sequence[npt.NDArray[np.floating]], n_init: int, seeds: int
) -> tuple[FloatArray, list[list[tuple[int, ...]]], float]:
    """SR (responses, seeds), labels per response per seed, and seconds spent clustering."""
    from sarl.rewards.structure.clustering import kmeans_bucket
    from sarl.rewards.structure.config import StructureRewardConfig
    from sarl.rewards.structure.scorer import score_labels

    by_m: dict[int, list[int]] = {}
    for i, x in enumerate(stack):
        by_m.setdefault(x.shape[0], []).append(i)
    scores = np.zeros((len(stack), seeds))
    labels: list[list[tuple[int, ...]]] = [[() for _ in range(seeds)] for _ in stack]
    spent = 0.0
    for s in range(seeds):
        cfg = StructureRewardConfig(seed=s, kmeans_n_init=n_init)
        for idx in by_m.values():
            start = time.perf_counter()
            rows = kmeans_bucket([stack[i] for i in idx], cfg)
            spent += time.perf_counter() - start
            for i, row in zip(idx, rows, strict=True):
                labels[i][s] = tuple(row.tolist())
                scores[i, s] = score_labels(labels[i][s], cfg).score
    return scores, labels, spent


def spread(scores: FloatArray) -> dict[str, float]:
    """Per-response SR spread over seeds, averaged over responses."""
    rng_ = scores.max(axis=1) - scores.min(axis=1)
    return {
        "sr_sd_over_seeds": float(scores.std(axis=1).mean()),
        "sr_range_over_seeds": float(rng_.mean()),
        "sr_range_max": float(rng_.max()),
        "seed_dependent": float((rng_ > 1e-12).mean()),
    }


def synthetic_case(n: int, noise: float, seeds: int) -> dict[str, Any]:
    """Recovery and spread at one noise level, for every n_init."""
    from sarl.rewards.structure.scorer import score_labels

    xs, truth = synthetic_responses(n, noise=noise, seed=round(noise * 1e4))
    true_sr = np.array([score_labels(t.tolist()).score for t in truth])
    true_inertia = np.array([inertia(x, t) for x, t in zip(xs, truth, strict=True)])
    out: dict[str, Any] = {
        "noise": noise,
        "responses": n,
        "seeds": seeds,
        "sr_sd_between_responses": float(true_sr.std()),
    }
    for n_init in N_INITS:
        scores, labels, spent = reseed(xs, n_init, seeds)
        recovered = np.array(
            [
                [lab == tuple(t.tolist()) for lab in row]
                for row, t in zip(labels, truth, strict=True)
            ]
        )
        worse = np.array(
            [
                [inertia(x, lab) > ti * (1 + _INERTIA_RTOL) for lab in row]
                for x, row, ti in zip(xs, labels, true_inertia, strict=True)
            ]
        )
        out[f"n_init_{n_init}"] = {
            "recovered": float(recovered.mean()),
            "sr_equals_true": float((np.abs(scores - true_sr[:, None]) <= 1e-12).mean()),
            "worse_than_true": float(worse.mean()),
            **spread(scores),
            "cluster_ms_per_response": spent / (n * seeds) * 1e3,
        }
    return out


def real_case(texts: list[list[str]], seeds: int) -> dict[str, Any]:
    """Spread on real step texts embedded by the bundled model, short and paper-scale apart."""
    from sarl.embedding.local import LocalEmbedder

    embedder = LocalEmbedder()
    flat = [t for steps in texts for t in steps]
    start = time.perf_counter()
    vectors = embedder.embed(flat)  # (steps, 384)
    embed_s = time.perf_counter() - start
    stack, at = [], 0
    for steps in texts:
        stack.append(vectors[at : at + len(steps)])
        at += len(steps)
    out: dict[str, Any] = {"embed_s": embed_s, "dim": int(vectors.shape[1])}
    groups = {
        "samples": [i for i, s in enumerate(texts) if len(s) != STEPS],
        "paper_scale": [i for i, s in enumerate(texts) if len(s) == STEPS],
    }
    per_n = {n_init: reseed(stack, n_init, seeds) for n_init in N_INITS}
    # The lowest inertia any run found, per response: the reference partition.
    inertias = {
        n_init: np.array([[inertia(stack[i], lab) for lab in row] for i, row in enumerate(labels)])
        for n_init, (_, labels, _) in per_n.items()
    }
    best = np.min(np.concatenate(list(inertias.values()), axis=1), axis=1)
    best_sr = np.array(
        [
            per_n[max(N_INITS)][0][i, int(np.argmin(inertias[max(N_INITS)][i]))]
            for i in range(len(texts))
        ]
    )
    for name, idx in groups.items():
        sizes = [len(texts[i]) for i in idx]
        row: dict[str, Any] = {
            "responses": len(idx),
            "steps": [min(sizes), max(sizes)],
            "seeds": seeds,
            "sr_sd_between_responses": float(best_sr[idx].std()),
        }
        for n_init, (scores, _, _) in per_n.items():
            found = inertias[n_init][idx] <= best[idx, None] * (1 + _INERTIA_RTOL)
            row[f"n_init_{n_init}"] = {"best_found": float(found.mean()), **spread(scores[idx])}
        out[name] = row
    return out


def cost(n: int) -> dict[str, Any]:
    """ms per response of the production batch path at paper scale, one core, best of three."""
    from bench_structure import synthetic_batch
    from threadpoolctl import threadpool_limits

    from sarl.rewards.structure.config import StructureRewardConfig
    from sarl.rewards.structure.scorer import score_embeddings_batch

    batch = synthetic_batch(n, noise=0.03)
    out: dict[str, Any] = {"responses": n, "steps": "50-70", "dim": DIM, "noise": 0.03}
    with threadpool_limits(1):
        for n_init in N_INITS:
            cfg = StructureRewardConfig(kmeans_n_init=n_init)
            best = np.inf
            for _ in range(3):
                start = time.perf_counter()
                score_embeddings_batch(batch, cfg)
                best = min(best, time.perf_counter() - start)
            out[f"n_init_{n_init}_ms_per_response"] = best / n * 1e3
    return out


def run(*, full: bool = False) -> dict[str, Any]:
    """The whole measurement; ``full`` = 200 responses per noise level and 50 seeds."""
    from threadpoolctl import threadpool_limits

    from sarl.embedding.base import EmbeddingError

    n, seeds, n_long, n_cost = (200, 50, 64, 1024) if full else (40, SEEDS, 24, 256)
    with threadpool_limits(1):
        synthetic = [synthetic_case(n, noise, seeds) for noise in NOISES]
        try:
            real: dict[str, Any] = real_case(real_step_texts(n_long), seeds)
        except (ImportError, EmbeddingError) as e:  # no bundled model: say so, go on
            real = {"skipped": f"{type(e).__name__}: {e}"}
    return {"n_inits": list(N_INITS), "synthetic": synthetic, "real": real, "cost": cost(n_cost)}


def print_table(result: dict[str, Any], console: Any = None) -> None:
    """Print the measurement as two tables and one line of cost (``console``: a rich Console)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=120)
    head = result["synthetic"][0]
    syn = Table(
        title=f"KMeans restarts, synthetic: {STEPS} steps x {DIM}-d, {CLUSTERS} true functions, "
        f"{head['responses']} responses x {head['seeds']} seeds per noise level"
    )
    columns = ("noise", "n_init", "recovered", "SR=true", "worse", "SR sd", "SR range")
    for col in (*columns, "seed-dep.", "sd between"):
        syn.add_column(col, justify="right")
    for case in result["synthetic"]:
        for n_init in result["n_inits"]:
            r = case[f"n_init_{n_init}"]
            syn.add_row(
                f"{case['noise']:g}",
                str(n_init),
                f"{r['recovered']:.1%}",
                f"{r['sr_equals_true']:.1%}",
                f"{r['worse_than_true']:.1%}",
                f"{r['sr_sd_over_seeds']:.4f}",
                f"{r['sr_range_over_seeds']:.4f}",
                f"{r['seed_dependent']:.0%}",
                f"{case['sr_sd_between_responses']:.4f}",
            )
    console.print(syn)
    real = result["real"]
    if "skipped" in real:
        console.print(f"KMeans restarts, real step texts: skipped ({real['skipped']})")
    else:
        tab = Table(title=f"KMeans restarts, real step texts: bundled model ({real['dim']}-d)")
        real_columns = ("resp. x steps", "n_init", "best found", "SR sd", "SR range", "seed-dep.")
        for col in (*real_columns, "sd between"):
            tab.add_column(col, justify="right")
        for name in ("samples", "paper_scale"):
            case = real[name]
            lo, hi = case["steps"]
            label = f"{case['responses']}x{lo}-{hi}" if lo != hi else f"{case['responses']}x{lo}"
            for n_init in result["n_inits"]:
                r = case[f"n_init_{n_init}"]
                tab.add_row(
                    label,
                    str(n_init),
                    f"{r['best_found']:.1%}",
                    f"{r['sr_sd_over_seeds']:.4f}",
                    f"{r['sr_range_over_seeds']:.4f}",
                    f"{r['seed_dependent']:.0%}",
                    f"{case['sr_sd_between_responses']:.4f}",
                )
        console.print(tab)
    c = result["cost"]
    console.print(
        f"KMeans restarts, cost ({c['responses']} responses x {c['steps']} steps x {c['dim']}-d, "
        "one core): "
        + ", ".join(
            f"n_init {n}: {c[f'n_init_{n}_ms_per_response']:.2f} ms/resp" for n in result["n_inits"]
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="200 responses/level, 50 seeds")
    parser.add_argument("--out", type=Path, default=None, help="write kmeans_restarts.json here")
    args = parser.parse_args()
    result = run(full=args.full)
    print_table(result)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "kmeans_restarts.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
