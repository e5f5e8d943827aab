"""The Experiment's prompts for cluster trainers: the task's train/eval problems and verl rows.

Called by :mod:`sarl_jobs.verl_trainer` (rows written as verl's parquet files) and
:mod:`sarl_jobs.trl_trainer` (a ``datasets.Dataset``). The split is the one the local runner uses
(``sarl.tasks.experiment``), so a cluster run trains on the same problems as a local one. Rows are
built by :func:`sarl.datasets.schema.verl_row`, the builder ``sarl data prepare`` uses too, so
task prompts and prepared datasets share one layout.

``spec.data.dataset`` on a cluster may be an absolute path in the image, an ``s3://`` URI, or a
path relative to the platform's data location (``SARL_DATA_URI``, set by the operator), e.g.
``train/aime.parquet`` as written by ``sarl data prepare aime --out s3://bucket/data``. Files in
verl's layout (``prompt`` + ``reward_model``, what ``sarl data prepare`` writes) are read by
their raw question (``extra_info.question``) and ``reward_model.ground_truth``, so the spec's
``prompt_template`` is applied once; other files by ``question_field``/``answer_field``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sarl.datasets.schema import verl_row
from sarl.integrations.verl.votes import ROLLOUT_N_FIELD
from sarl.spec.experiment import Experiment
from sarl.tasks.experiment import experiment_problems
from sarl.tasks.generators import Problem, load_dataset_file


def dataset_location(dataset: str, environ: Mapping[str, str]) -> str:
    """Where ``spec.data.dataset`` is: as given when it is a URI, absolute or exists here,
    else under ``SARL_DATA_URI``."""
    from sarl.datasets.uris import is_s3, join

    root = environ.get("SARL_DATA_URI")
    if is_s3(dataset) or Path(dataset).is_absolute() or Path(dataset).exists() or not root:
        return dataset
    return join(root, dataset)


def _row_problem(row: Mapping[str, Any], question_field: str, answer_field: str) -> Problem:
    if "prompt" in row and isinstance(row.get("reward_model"), Mapping):  # verl layout
        extra = row.get("extra_info") or {}
        question = extra.get("question") if isinstance(extra, Mapping) else None
        if not question:  # prepared without the raw question: the user message as is
            prompt = list(row["prompt"])
            question = prompt[-1]["content"] if prompt else ""
        return Problem(str(question), str(row["reward_model"].get("ground_truth") or ""))
    return Problem(str(row[question_field]), str(row[answer_field]))


def load_problems(exp: Experiment, environ: Mapping[str, str]) -> list[Problem]:
    """The problems of ``spec.data.dataset`` (local or S3; see the module docstring)."""
    from sarl.datasets.uris import is_s3, read_parquet

    data = exp.spec.data
    if not data.dataset:
        raise ValueError("spec.data.dataset: required when task is 'dataset'")
    where = dataset_location(data.dataset, environ)
    if not is_s3(where) and not where.endswith((".parquet", ".pq")):
        return load_dataset_file(where, data.question_field, data.answer_field)
    rows = read_parquet(where, endpoint_url=exp.spec.storage.endpoint_url)
    try:
        return [_row_problem(r, data.question_field, data.answer_field) for r in rows]
    except KeyError as e:
        raise ValueError(
            f"spec.data.dataset={data.dataset!r}: column {e} missing in {where} "
            f"(found {sorted(rows[0]) if rows else []})"
        ) from e


def problems(
    exp: Experiment, environ: Mapping[str, str] | None = None
) -> tuple[list[Problem], list[Problem]]:
    """(train, eval) problems of ``spec.data``; ``evaluation.max_problems`` caps eval."""
    data = exp.spec.data
    rows = None
    if data.task == "dataset" and data.dataset:
        rows = load_problems(exp, os.environ if environ is None else environ)
    return experiment_problems(exp, rows)


def verl_rows(exp: Experiment, items: list[Problem], split: str) -> list[dict[str, Any]]:
    """Rows in verl's RL dataset layout (see :mod:`sarl.datasets.schema`): a chat ``prompt``
    from ``data.prompt_template``, ``data_source`` = the task (the reward function's first
    argument), the answer under ``reward_model.ground_truth`` and ``extra_info``. With a vote
    set (``spec.votes_per_prompt``), training rows ask verl for that many responses
    (``__rollout_n__``, :mod:`sarl.integrations.verl.votes`)."""
    data = exp.spec.data
    rows = [
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
    votes = exp.spec.votes_per_prompt
    if split == "train" and votes is not None:
        for row in rows:
            row[ROLLOUT_N_FIELD] = votes
    return rows
