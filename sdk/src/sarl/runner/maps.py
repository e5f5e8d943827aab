"""Reasoning-map PNGs of sample responses during a local run (logged to MLflow).

Called by ``sarl.runner.session``: at step 0 on responses sampled from the policy before any RL
update (:func:`sample_responses`), then every ``tracking.log_maps_every_n_steps`` steps on the
first responses of the batch TRL just scored, so a run's maps show before and after. Each map
says what it is of (:func:`map_labels`): the arm and seed when the run belongs to a Study, the
step, the sample, whether its final answer is correct (checked as the ``accuracy`` metric
checks it), and excerpts of the prompt and the response.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.spec.study import TAG_ARM, TAG_ROLE, TAG_SEED

#: Characters of the prompt and of the response a map's caption shows.
PROMPT_EXCERPT = 160
RESPONSE_EXCERPT = 420


@dataclass(frozen=True)
class MapSample:
    """One response to draw: its prompt (text, or chat messages), the response text and the
    expected answer (``None``: nothing to check it against)."""

    prompt: Any
    response: str
    ground_truth: str | None = None


def excerpt(text: str, limit: int) -> str:
    """``text`` on one line (runs of whitespace become one space), cut to ``limit`` characters
    with an ellipsis. Control and unassigned characters (an early policy emits stray bytes; no
    font draws them) show as ``�``."""
    flat = "".join(
        "\N{REPLACEMENT CHARACTER}" if unicodedata.category(ch) in ("Cc", "Cf", "Cn", "Cs") else ch
        for ch in " ".join(text.split())
    )
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def prompt_text(prompt: Any) -> str:
    """The text of a TRL prompt: the string itself, or the last user message of a chat."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, Mapping) and message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else str(content)
    return str(prompt)


def verdict(response: str, ground_truth: str | None) -> str:
    """Whether the response's final answer is right, in words (empty without a ground truth)."""
    if ground_truth is None:
        return ""
    answer = extract_answer(response)
    if answer is None:
        return f"incorrect: no final answer (expected {ground_truth})"
    if answers_equal(answer, ground_truth):
        return f"correct: {answer}"
    return f"incorrect: answered {answer}, expected {ground_truth}"


def run_label(name: str, tags: Mapping[str, str]) -> str:
    """Who drew the map: ``arm <arm> · seed <seed>`` in a Study, else the Experiment's name."""
    if tags.get(TAG_ROLE) == "arm" and TAG_ARM in tags:
        return f"arm {tags[TAG_ARM]} · seed {tags.get(TAG_SEED, '?')}"
    return name


def map_labels(
    sample: MapSample, *, run: str, step: int, index: int, count: int
) -> tuple[str, str]:
    """(title, caption) of one map: ``run`` (:func:`run_label`), the step (step 0 is marked as
    before any RL update), the sample's place and its verdict; the caption holds excerpts of
    the prompt and the response."""
    when = f"step {step}" + (" (before RL)" if step == 0 else "")
    head = f"{run} · {when} · sample {index + 1} of {count}"
    right = verdict(sample.response, sample.ground_truth)
    title = f"{head}\n{right}" if right else head
    caption = (
        f"prompt: {excerpt(prompt_text(sample.prompt), PROMPT_EXCERPT)}\n"
        f"response: {excerpt(sample.response, RESPONSE_EXCERPT)}"
    )
    return title, caption


def draw_sample_maps(
    samples: Sequence[MapSample], scorer: Any, out_dir: Path, *, run: str, step: int
) -> list[Path]:
    """Score the ``samples``' responses with ``scorer`` (a StructureScorer) and draw one PNG
    each, labelled by :func:`map_labels`.

    Without a structure scorer in the run (no ``structure`` reward, even at weight 0) there is
    no map to draw and nothing is written.
    """
    if scorer is None or not samples:
        return []
    from sarl.viz.reasoning_map import draw_reasoning_map

    results = scorer.score_batch([s.response for s in samples])
    paths = []
    for i, (sample, result) in enumerate(zip(samples, results, strict=True)):
        title, caption = map_labels(sample, run=run, step=step, index=i, count=len(samples))
        paths.append(
            draw_reasoning_map(result, out_dir / f"sample-{i}.png", title=title, caption=caption)
        )
    return paths


def sample_responses(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
) -> tuple[list[str], list[list[int]]]:
    """One sampled response per prompt, as text and as token ids (up to and including the end
    token, as TRL passes ``completion_ids``: a policy embedder re-embeds them).

    Sampled from a forked random state seeded with ``seed``: drawing the step-0 maps leaves the
    random stream training then uses as it was, so adding maps changes no run's trajectory.
    """
    import torch

    was_training = model.training
    model.eval()
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    try:
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(seed)
            gen = model.generate(
                **enc,
                do_sample=True,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )  # (len(prompts), prompt_len + new)
    finally:
        model.train(was_training)
    new = gen[:, enc["input_ids"].shape[1] :]  # (len(prompts), new)
    ids: list[list[int]] = []
    for row in new.tolist():  # padding follows the end token: cut after the first one
        cut = next((i + 1 for i, t in enumerate(row) if t == tokenizer.eos_token_id), len(row))
        ids.append(row[:cut])
    return tokenizer.batch_decode(ids, skip_special_tokens=True), ids
