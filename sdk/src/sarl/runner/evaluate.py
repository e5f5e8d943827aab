"""Held-out evaluation of a local run: k sampled answers per problem -> avg@k and pass@k.

Called by the evaluation callback of ``sarl.runner.local`` every ``evaluation.every_n_steps``
steps and at the end. Generation is plain Hugging Face ``generate`` on CPU (vLLM is the cluster
path); answers are checked with :mod:`sarl.rewards.math_answer`, and pass@k uses the unbiased
estimator of :mod:`sarl.evaluation.passk`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sarl.evaluation.passk import summarize
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.tasks.generators import Problem


def generate_samples(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    k: int,
    max_new_tokens: int,
    temperature: float,
    batch_size: int = 128,
) -> list[list[str]]:
    """``k`` sampled completions per prompt (decoded, special tokens kept out).

    ``batch_size`` counts sequences per ``generate`` call: on a CPU a small model's decoding
    is bound by per-token overhead, so wide batches cost little more than narrow ones.
    """
    import torch

    was_training = model.training
    model.eval()
    out: list[list[str]] = []
    try:
        for start in range(0, len(prompts), max(1, batch_size // k)):
            chunk = list(prompts[start : start + max(1, batch_size // k)])
            enc = tokenizer(chunk, return_tensors="pt", padding=True)
            with torch.no_grad():
                gen = model.generate(
                    **enc,
                    do_sample=True,
                    temperature=temperature,
                    max_new_tokens=max_new_tokens,
                    num_return_sequences=k,
                    pad_token_id=tokenizer.pad_token_id,
                )  # (len(chunk) * k, prompt_len + new)
            texts = tokenizer.batch_decode(
                gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
            )
            out.extend(texts[i * k : (i + 1) * k] for i in range(len(chunk)))
    finally:
        model.train(was_training)
    return out


def evaluate_problems(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    prompt_template: str,
    *,
    k: int,
    max_new_tokens: int,
    temperature: float,
) -> dict[str, float]:
    """avg@k, pass@k and the answer rate on ``problems``."""
    prompts = [prompt_template.format(question=p.question) for p in problems]
    samples = generate_samples(
        model, tokenizer, prompts, k=k, max_new_tokens=max_new_tokens, temperature=temperature
    )
    correct: list[list[bool]] = []
    answered = 0
    for problem, texts in zip(problems, samples, strict=True):
        row = []
        for text in texts:
            pred = extract_answer(text)
            answered += pred is not None
            row.append(pred is not None and answers_equal(pred, problem.answer))
        correct.append(row)
    stats = summarize(correct, k)
    stats["answer_rate"] = answered / max(1, len(problems) * k)
    return {key: float(value) for key, value in stats.items()}
