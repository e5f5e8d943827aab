"""An Experiment's train/eval problems: the one split the local runner and the cluster jobs share.

Called by ``sarl.runner.session`` (dataset files read here, locally) and ``sarl_jobs.data``
(which reads dataset rows itself, locally or from S3, and passes them in), so a cluster run
trains and evaluates on the same problems as a local one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sarl.tasks.generators import Problem, load_dataset_file, split_problems, train_eval_split

if TYPE_CHECKING:
    from sarl.spec.experiment import Experiment


def experiment_problems(
    exp: Experiment, rows: Sequence[Problem] | None = None
) -> tuple[list[Problem], list[Problem]]:
    """(train, eval) problems of ``spec.data``: a dataset task splits ``rows`` (default: read
    from the local ``data.dataset`` file) with at most a fifth held out; a generator task draws
    its own. ``evaluation.max_problems`` caps eval in both cases."""
    data = exp.spec.data
    if data.task == "dataset" and data.dataset:
        if rows is None:
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
