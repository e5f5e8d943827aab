"""``embedder.kind: policy`` (SARL v1 A.1, Implementation A): steps embedded by the policy's own
hidden states over the tokens it sampled, with the structure reward's step boundaries."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from sarl.embedding.base import EmbeddingError
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.embedding.policy import PolicyEmbedder
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.scorer import StructureScorer
from sarl.rewards.structure.segmentation import extract_steps
from sarl.spec.experiment import DataSpec
from sarl.tasks.generators import make_problems
from sarl.tasks.traces import structured_trace

torch = pytest.importorskip("torch")

CONFIG = StructureRewardConfig()
TEMPLATE = DataSpec().prompt_template

Batch = tuple[list[str], list[list[int]], list[str]]  # prompts, completion ids, texts


@pytest.fixture(scope="module")
def batch(tiny_lm: tuple[Any, Any]) -> Batch:
    """Completions as TRL hands them over: ids cut after the first eos, text decoded with
    special tokens skipped. Half sampled from the policy, half written traces (many steps)."""
    model, tokenizer = tiny_lm
    rng = random.Random(0)
    problems = make_problems("arithmetic", 4, seed=11, difficulty=2)
    prompts = [TEMPLATE.format(question=p.question) for p in problems]
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        out = model.generate(
            **enc, do_sample=True, max_new_tokens=48, pad_token_id=tokenizer.pad_token_id
        )
    eos = tokenizer.eos_token_id
    ids: list[list[int]] = []
    for row in out[:, enc["input_ids"].shape[1] :].tolist():
        ids.append(row[: row.index(eos) + 1] if eos in row else row)
    for p in problems:
        trace = tokenizer(structured_trace(p, rng), add_special_tokens=False)["input_ids"]
        ids.append([*trace, tokenizer.eos_token_id])
    prompts = prompts + prompts
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    assert len({len(i) for i in ids}) > 1  # mixed lengths: padding is exercised
    return prompts, ids, texts


@pytest.fixture
def embedder(tiny_lm: tuple[Any, Any]) -> PolicyEmbedder:
    built = make_embedder(EmbedderConfig(kind="policy"))
    assert isinstance(built, PolicyEmbedder)
    built.bind(*tiny_lm)
    return built


def test_steps_are_the_reward_s_steps_and_their_tokens_decode_back(
    embedder: PolicyEmbedder, batch: Batch, tiny_lm: tuple[Any, Any]
) -> None:
    _, tokenizer = tiny_lm
    prompts, ids, texts = batch
    done = embedder.embed_completions(prompts, ids, texts, CONFIG)
    assert sum(len(c.texts) for c in done) > len(done)  # the batch has steps to pool
    for c, row, text in zip(done, ids, texts, strict=True):
        assert c.texts == extract_steps(text, CONFIG).texts
        assert c.vectors.shape[0] == len(c.texts)
        for step, positions in zip(c.texts, c.token_positions, strict=True):
            # A step's tokens may carry whitespace next to it (" 7", "\n"): stripped here.
            assert tokenizer.decode([row[p] for p in positions]).strip() == step


def test_vectors_are_unit_norm_and_the_paper_s_mean(
    embedder: PolicyEmbedder, batch: Batch, tiny_lm: tuple[Any, Any]
) -> None:
    """e_t = mean of layer l (the middle: 1 of 2) over step t's tokens, with the prompt as
    context before the completion."""
    model, tokenizer = tiny_lm
    prompts, ids, texts = batch
    c = embedder.embed_completions(prompts[-1:], ids[-1:], texts[-1:], CONFIG)[0]
    assert np.allclose(np.linalg.norm(c.vectors, axis=1), 1.0, atol=1e-5)
    context = tokenizer(prompts[-1])["input_ids"]
    with torch.no_grad():
        out = model.eval()(input_ids=torch.tensor([context + ids[-1]]), output_hidden_states=True)
    model.train()
    for vector, positions in zip(c.vectors, c.token_positions, strict=True):
        mean = out.hidden_states[1][0, positions + len(context)].mean(dim=0).numpy()
        assert np.allclose(vector, mean / np.linalg.norm(mean), atol=1e-5)


def test_same_completion_same_vectors_whatever_the_batch(
    tiny_lm: tuple[Any, Any], batch: Batch
) -> None:
    """Deterministic; batch size and padding (a batch of mixed lengths vs one by one) change
    nothing beyond float rounding."""
    prompts, ids, texts = batch

    def run(size: int) -> list[np.ndarray]:
        e = PolicyEmbedder(batch_size=size)
        e.bind(*tiny_lm)
        return [c.vectors for c in e.embed_completions(prompts, ids, texts, CONFIG)]

    reference = run(len(ids))
    assert all(np.array_equal(a, b) for a, b in zip(reference, run(len(ids)), strict=True))
    for size in (1, 3):
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(reference, run(size), strict=True))
    e = PolicyEmbedder()
    e.bind(*tiny_lm)
    for i, expected in enumerate(reference):
        (alone,) = e.embed_completions(prompts[i : i + 1], ids[i : i + 1], texts[i : i + 1], CONFIG)
        assert np.allclose(alone.vectors, expected, atol=1e-5)


def test_the_policy_is_left_as_it_was(
    embedder: PolicyEmbedder, batch: Batch, tiny_lm: tuple[Any, Any]
) -> None:
    model, _ = tiny_lm
    model.train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    rng = torch.get_rng_state()
    embedder.embed_completions(*batch, CONFIG)
    assert all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    assert flags == {n: p.requires_grad for n, p in model.named_parameters()}
    assert torch.equal(rng, torch.get_rng_state())


def test_embed_inside_a_batch_returns_its_steps_and_scores(
    embedder: PolicyEmbedder, batch: Batch
) -> None:
    prompts, ids, texts = batch
    expected = embedder.embed_completions(prompts, ids, texts, CONFIG)
    steps = [t for c in expected for t in c.texts]
    with embedder.batch(prompts, ids, texts, CONFIG):
        assert np.array_equal(embedder.embed(steps), np.concatenate([c.vectors for c in expected]))
        results = StructureScorer(CONFIG, embedder, workers=1).score_batch(texts)
    assert [r.num_steps for r in results] == [len(c.texts) for c in expected]
    with pytest.raises(EmbeddingError, match="outside a training batch"):
        embedder.embed(steps)  # the batch is closed


def test_unbound_policy_is_an_error_naming_the_field(batch: Batch) -> None:
    embedder = make_embedder(EmbedderConfig(kind="policy"))
    with pytest.raises(EmbeddingError, match=r"embedder\.kind 'policy': no policy model is bound"):
        embedder.embed(["Compute 1 + 2 = 3."])
    assert isinstance(embedder, PolicyEmbedder)
    with pytest.raises(EmbeddingError, match=r"embedder\.kind 'policy'.*hf_causal"):
        embedder.embed_completions(*batch, CONFIG)


def test_steps_that_are_not_the_batch_s_are_refused(embedder: PolicyEmbedder, batch: Batch) -> None:
    prompts, ids, texts = batch
    steps = [t for text in texts for t in extract_steps(text, CONFIG).texts]
    with embedder.batch(prompts, ids, texts, CONFIG):
        with pytest.raises(EmbeddingError, match="step 0 to embed is 'other'"):
            embedder.embed(["other", *steps[1:]])
        with pytest.raises(EmbeddingError, match="segmentation"):
            embedder.embed(steps[:-1])


def test_a_scored_text_that_is_not_the_decoded_ids_is_refused(
    embedder: PolicyEmbedder, batch: Batch
) -> None:
    prompts, ids, texts = batch
    with pytest.raises(EmbeddingError, match="completion 1: the scored text is not"):
        embedder.embed_completions(prompts[:2], ids[:2], [texts[0], texts[1] + " "], CONFIG)


def test_max_tokens_cuts_the_prompt_never_the_completion(
    tiny_lm: tuple[Any, Any], batch: Batch
) -> None:
    prompts, ids, texts = batch
    i = len(ids) - 1
    capped = PolicyEmbedder(max_tokens=len(ids[i]))  # no room left for the prompt
    capped.bind(*tiny_lm)
    bare = PolicyEmbedder()
    bare.bind(*tiny_lm)
    (a,) = capped.embed_completions(prompts[i:], ids[i:], texts[i:], CONFIG)
    (b,) = bare.embed_completions([None], ids[i:], texts[i:], CONFIG)
    assert np.allclose(a.vectors, b.vectors, atol=1e-6)
