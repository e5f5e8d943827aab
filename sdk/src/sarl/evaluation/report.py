"""Evaluation artifacts: per-problem results as JSON Lines, a summary, and a PNG bar chart.

Called by the evaluation job (``sarl_jobs.evaluate``) before it uploads the files to MLflow.
The JSONL holds every response and verdict, so avg@k and pass@k can be recomputed from it with
:func:`sarl.evaluation.passk.summarize` (the job's tests do exactly that). matplotlib is a core
dependency; it is imported on use with the non-interactive Agg backend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from sarl.evaluation.benchmark import ProblemResult

RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
CHART_FILE = "scores.png"


def write_results(results: Sequence[ProblemResult], path: Path) -> Path:
    """One JSON object per problem (see :class:`ProblemResult`), in benchmark order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
    return path


def write_summary(stats: Mapping[str, Mapping[str, float]], k: int, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"k": k, "benchmarks": {name: dict(s) for name, s in stats.items()}}
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def plot_scores(
    stats: Mapping[str, Mapping[str, float]], k: int, path: Path, title: str = ""
) -> Path:
    """Grouped bars of avg@k and pass@k per benchmark (0-100 %), values written on the bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(stats)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(names) + 1.5), 3.6))
    width = 0.38
    for offset, key, label in (
        (-width / 2, "avg@k", f"avg@{k}"),
        (width / 2, "pass@k", f"pass@{k}"),
    ):
        xs = [i + offset for i in range(len(names))]
        values = [100.0 * stats[n][key] for n in names]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title(title or f"avg@{k} and pass@{k}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
