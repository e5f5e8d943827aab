"""The Experiment's prompts for cluster trainers: the task's train/eval problems and verl rows.

Called by :mod:`sarl_jobs.verl_trainer` (rows written as verl's parquet files) and
:mod:`sarl_jobs.trl_trainer` (a ``datasets.Dataset``). The split is the one the local runner uses
(``sarl.tasks.generators``), so a cluster run trains on the same problems as a local one. Rows are
built by :func:`sarl.datasets.schema.verl_row`, the builder ``sarl data prepare`` uses too, so
task prompts and prepared datasets share one layout.
"""

from __future__ import annotations

from typing import Any

from sarl.datasets.schema import verl_row
from sarl.spec.experiment import Experiment
from sarl.tasks.generators import (
    Problem,
    load_dataset_file,
    split_problems,
    train_eval_split,
)


def problems(exp: Experiment) -> tuple[list[Problem], list[Problem]]:
    """(train, eval) problems of ``spec.data``; ``evaluation.max_problems`` caps eval."""
    data = exp.spec.data
    if data.task == "dataset" and data.dataset:
        rows = load_dataset_file(data.dataset, data.question_field, data.answer_field)
        train, evals = split_problems(
            rows,
            min(data.eval_size, max(1, len(rows) // 5)),
            seed=data.split_seed,
            train_size=data.train_size,
        )
    else:
        train, evals = train_eval_split(
            data.task,
            data.train_size,
            data.eval_size,
            seed=data.split_seed,
            difficulty=data.difficulty,
        )
    limit = exp.spec.evaluation.max_problems
    return list(train), list(evals)[:limit] if limit else list(evals)


def verl_rows(exp: Experiment, items: list[Problem], split: str) -> list[dict[str, Any]]:
    """Rows in verl's RL dataset layout (see :mod:`sarl.datasets.schema`): a chat ``prompt``
    from ``data.prompt_template``, ``data_source`` = the task (the reward function's first
    argument), the answer under ``reward_model.ground_truth`` and ``extra_info``."""
    data = exp.spec.data
    return [
        verl_row(
            data_source=data.task,
            question=p.question,
            template=data.prompt_template,
            ground_truth=p.answer,
            split=split,
            index=i,
            ability="reasoning",
        )
        for i, p in enumerate(items)
    ]
