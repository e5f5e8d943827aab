"""verl's RL dataset row: the one layout every sarl parquet file uses.

Called by ``sarl data prepare`` (:mod:`sarl.datasets.prepare`), by the cluster jobs
(``sarl_jobs.data.verl_rows``, the task's train/eval prompts) and by the evaluation job, which
reads benchmark rows back with :func:`check_row`. The layout is verl's
(``verl/utils/dataset/rl_dataset.py`` and its ``examples/data_preprocess`` scripts):

* ``data_source``: names the dataset; verl passes it to the reward function first.
* ``prompt``: a chat list ``[{"role": "user", "content": ...}]``; verl applies the chat template.
* ``ability``: a free-form category (``math``, ``open_ended``, ``reasoning``).
* ``reward_model``: ``{"style": "rule" | "model", "ground_truth": str}``; ``rule`` for a
  checkable answer, ``model`` (verl's name for "no rule-checkable answer") with an empty
  ground truth for open-ended prompts.
* ``extra_info``: ``{"split", "index", ...}`` plus source fields (year, level, rubric, ...).

Pure Python: no pandas here (the writers convert).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from sarl.datasets.tables import DatasetError

#: The prompt the papers give for the math setting (sarl-v1/v2, Appendix B.1: "Let's think step
#: by step and output the final answer within \boxed{}." appended to the problem).
MATH_PROMPT_TEMPLATE = (
    "{question} Let's think step by step and output the final answer within \\boxed{{}}."
)
#: OpenRubrics-v2: "We use only the instruction field as the training prompt" (Appendix B.1).
INSTRUCTION_ONLY_TEMPLATE = "{question}"

COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
RewardStyle = Literal["rule", "model"]


def check_template(template: str, field: str = "--prompt-template") -> str:
    """``template`` if it is a format string with a ``{question}`` field and no other;
    DatasetError naming ``field`` otherwise."""
    if "{question}" not in template:
        raise DatasetError(f"{field}: {template!r} has no {{question}} placeholder")
    try:
        template.format(question="q")
    except (IndexError, KeyError, ValueError) as e:
        raise DatasetError(f"{field}: {template!r} is not a valid format string: {e}") from e
    return template


def verl_row(
    *,
    data_source: str,
    question: str,
    template: str,
    ground_truth: str,
    split: str,
    index: int,
    ability: str,
    style: RewardStyle = "rule",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One row in verl's layout; the prompt is ``template.format(question=question)``."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": template.format(question=question)}],
        "ability": ability,
        "reward_model": {"style": style, "ground_truth": ground_truth},
        # The raw question too: trainers apply the Experiment's own prompt template to it.
        "extra_info": {"split": split, "index": index, "question": question, **(extra or {})},
    }


def check_row(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, str]], str]:
    """The chat prompt and ground truth of a row read back from a parquet file.

    ValueError naming ``where`` (file and row) and the field when the row is not in the layout.
    """
    missing = [c for c in ("prompt", "reward_model") if c not in row]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}; found {sorted(row)}")
    prompt = row["prompt"]
    if hasattr(prompt, "tolist"):  # pyarrow lists come back as numpy arrays
        prompt = prompt.tolist()
    if not isinstance(prompt, list) or not prompt:
        raise ValueError(f"{where}: prompt must be a non-empty chat list, got {type(prompt)}")
    messages: list[dict[str, str]] = []
    for i, message in enumerate(prompt):
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
            raise ValueError(f"{where}: prompt[{i}] is not a {{role, content}} message")
        messages.append({"role": str(message.get("role", "user")), "content": message["content"]})
    reward = row["reward_model"]
    truth = reward.get("ground_truth") if isinstance(reward, Mapping) else None
    if not isinstance(truth, str) or not truth.strip():
        raise ValueError(f"{where}: reward_model.ground_truth is missing or empty")
    return messages, truth
