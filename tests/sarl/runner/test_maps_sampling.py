"""The step-0 maps sample the policy without touching training's random stream, and hand back
token ids as TRL does (up to and including the end token), on a real tiny Qwen3 policy."""

from __future__ import annotations

import random
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sarl.runner import tiny  # noqa: E402
from sarl.runner.maps import sample_responses  # noqa: E402
from sarl.spec.experiment import DataSpec, TinyModel  # noqa: E402
from sarl.tasks.generators import make_problems  # noqa: E402
from sarl.tasks.traces import corpus  # noqa: E402

TEMPLATE = DataSpec().prompt_template


@pytest.fixture(scope="module")
def policy() -> tuple[Any, Any, list[str]]:
    problems = make_problems("arithmetic", 200, seed=0, difficulty=2)
    prompts = [TEMPLATE.format(question=p.question) for p in problems]
    tokenizer = tiny.train_tokenizer(corpus(problems, random.Random(0)) + prompts, 384)
    tokenizer.padding_side = "left"  # as the local runner loads it
    model = tiny.build_tiny_qwen(tokenizer, TinyModel(), seed=0)
    return model, tokenizer, prompts[:3]


def _sample(policy: tuple[Any, Any, list[str]], seed: int) -> tuple[list[str], list[list[int]]]:
    model, tokenizer, prompts = policy
    return sample_responses(
        model, tokenizer, prompts, max_new_tokens=24, temperature=1.0, seed=seed
    )


def test_sampling_leaves_the_random_stream_and_the_mode_as_they_were(
    policy: tuple[Any, Any, list[str]],
) -> None:
    model = policy[0]
    model.train()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _sample(policy, seed=0)
    assert torch.equal(torch.get_rng_state(), before)
    assert model.training


def test_responses_are_seeded_and_come_with_trl_shaped_ids(
    policy: tuple[Any, Any, list[str]],
) -> None:
    _, tokenizer, prompts = policy
    texts, ids = _sample(policy, seed=0)
    assert (texts, ids) == _sample(policy, seed=0)
    assert _sample(policy, seed=1) != (texts, ids)
    assert len(texts) == len(ids) == len(prompts)
    for text, row in zip(texts, ids, strict=True):
        assert 1 <= len(row) <= 24
        # Cut after the first end token; no padding behind it.
        assert tokenizer.eos_token_id not in row[:-1]
        assert text == tokenizer.decode(row, skip_special_tokens=True)
