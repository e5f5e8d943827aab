"""The TRL adapter with ``embedder.kind: policy``: the trainer's policy is bound once, and each
reward call embeds the batch's steps from the ``completion_ids`` TRL passes.

The trainer is a stand-in holding what the adapter reads (``model``, ``processing_class``); the
local runner's test (``tests/sarl/runner/test_policy_embedder.py``) trains with the real TRL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from sarl.embedding.base import EmbeddingError
from sarl.embedding.policy import PolicyEmbedder
from sarl.integrations.trl import bind_policy, make_trl_reward, policy_embedder
from sarl.rewards.structure import score_embeddings
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.tasks.generators import make_problems
from tests.sarl.embedding import tiny_policy

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

POLICY = {"embedder": {"kind": "policy"}, "workers": 1}


@dataclass
class FakeTrainer:
    model: Any
    processing_class: Any


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> FakeTrainer:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_policy.prepare(tmp_path_factory)
    return FakeTrainer(
        AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    )


def _batch(tokenizer: Any) -> tuple[list[str], list[list[int]], list[str]]:
    """Two prompts x two completions, in TRL's order (a prompt's completions are adjacent)."""
    prompts, ids = [], []
    for i, p in enumerate(make_problems("arithmetic", 2, seed=4, difficulty=2)):
        for j in range(2):
            text = f"<think>Goal: {p.question}\n\nCompute {i} + {j}.\n\nCheck.</think>\\boxed{{1}}"
            prompts.append(p.question)
            ids.append(
                [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
            )
    return prompts, ids, tokenizer.batch_decode(ids, skip_special_tokens=True)


def test_reward_call_embeds_the_sampled_ids_with_the_bound_policy(trainer: FakeTrainer) -> None:
    func = make_trl_reward("structure", POLICY, num_generations=2)
    other = make_trl_reward("ground_truth")
    assert bind_policy([func, other], trainer) == 1
    embedder = policy_embedder(func)
    assert embedder is not None and embedder.bound
    prompts, ids, texts = _batch(trainer.processing_class)
    scores = func(prompts, texts, completion_ids=ids)
    # The same scores from the vectors the embedder computes for these completions.
    done = embedder.embed_completions(prompts, ids, texts, StructureRewardConfig())
    assert scores == [score_embeddings(c.vectors).score for c in done]
    with torch.no_grad():  # the next call sees the weights as they are then (updated in place)
        trainer.model.model.embed_tokens.weight.mul_(-1.0)
    moved = embedder.embed_completions(prompts, ids, texts, StructureRewardConfig())
    assert not np.allclose(moved[0].vectors, done[0].vectors)


def test_without_completion_ids_the_call_is_refused(trainer: FakeTrainer) -> None:
    func = make_trl_reward("structure", POLICY)
    bind_policy([func], trainer)
    prompts, _, texts = _batch(trainer.processing_class)
    with pytest.raises(ValueError, match=r"embedder\.kind 'policy' needs the completion_ids"):
        func(prompts, texts)


def test_unbound_policy_fails_naming_the_field(trainer: FakeTrainer) -> None:
    func = make_trl_reward("structure", POLICY)
    prompts, ids, texts = _batch(trainer.processing_class)
    with pytest.raises(EmbeddingError, match=r"embedder\.kind 'policy': no policy model is bound"):
        func(prompts, texts, completion_ids=ids)


def test_other_embedders_ignore_completion_ids() -> None:
    func = make_trl_reward("structure", {"embedder": {"kind": "local"}, "workers": 1})
    assert policy_embedder(func) is None
    assert bind_policy([func], object()) == 0
    assert isinstance(make_trl_reward("structure", POLICY).reward.scorer.embedder, PolicyEmbedder)  # type: ignore[attr-defined]
