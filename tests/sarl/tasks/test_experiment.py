"""experiment_problems: one split for local runs and cluster jobs; max_problems caps eval for
generated and dataset tasks alike."""

from __future__ import annotations

import json
from pathlib import Path

from sarl.spec.experiment import Experiment
from sarl.tasks.experiment import experiment_problems
from sarl.tasks.generators import load_dataset_file


def _exp(**spec: object) -> Experiment:
    return Experiment.model_validate({"metadata": {"name": "x"}, "spec": spec})


def test_generated_task_is_deterministic_and_capped() -> None:
    exp = _exp(preset="local-grpo-arithmetic", evaluation={"max_problems": 5})
    train, evals = experiment_problems(exp)
    assert (len(train), len(evals)) == (exp.spec.data.train_size, 5)
    assert experiment_problems(exp) == (train, evals)


def test_dataset_rows_given_or_read_split_the_same_and_are_capped(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(50))
    )
    exp = _exp(
        data={"task": "dataset", "dataset": str(path), "eval_size": 8},
        evaluation={"max_problems": 3},
    )
    read = experiment_problems(exp)
    given = experiment_problems(exp, load_dataset_file(path))
    assert read == given
    train, evals = read
    assert len(evals) == 3 and len(train) + 8 <= 50
    assert not {p.question for p in train} & {p.question for p in evals}
