"""The built-in tiny policy: tokenizer, Qwen3 model, SFT warm start and the prepared cache."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sarl.rewards.math_answer import extract_answer  # noqa: E402
from sarl.rewards.structure.config import StructureRewardConfig  # noqa: E402
from sarl.rewards.structure.segmentation import extract_steps  # noqa: E402
from sarl.runner import tiny  # noqa: E402
from sarl.spec.experiment import DataSpec, ModelSpec, TinyModel, WarmStart  # noqa: E402
from sarl.tasks.generators import make_problems, train_eval_split  # noqa: E402
from sarl.tasks.traces import corpus, structured_trace  # noqa: E402

TEMPLATE = DataSpec().prompt_template


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    problems = make_problems("arithmetic", 300, seed=0, difficulty=2)
    problems += make_problems("countdown", 300, seed=0, difficulty=2)
    texts = corpus(problems, random.Random(0))
    texts += [TEMPLATE.format(question=p.question) for p in problems]
    return tiny.train_tokenizer(texts, 384)


def test_tokenizer_round_trips_traces_and_keeps_think_tags(tokenizer: Any) -> None:
    rng = random.Random(1)
    for task in ("arithmetic", "countdown"):
        for p in make_problems(task, 20, seed=9, difficulty=3):
            text = TEMPLATE.format(question=p.question) + structured_trace(p, rng)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert tokenizer.decode(ids, skip_special_tokens=True) == text
            ids.append(tokenizer.eos_token_id)
            assert tokenizer.decode(ids, skip_special_tokens=True) == text  # eos is dropped
    unseen = "Ünïcode ∑ 😀\ttabs\r\n  spaces {}"
    assert tokenizer.decode(tokenizer(unseen)["input_ids"]) == unseen


def test_tokenizer_units(tokenizer: Any) -> None:
    for tag in ("<think>", "</think>", "\n\n"):
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1, tag
    # Digits split individually: no token holds two digits, so numbers are digit sequences.
    assert all(sum(ch.isdigit() for ch in tok) <= 1 for tok in tokenizer.get_vocab())
    ids = {tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id}
    assert len(ids) == 3 and None not in ids
    assert tokenizer.padding_side == "left"
    assert len(tokenizer) == 384 + 2  # BPE vocabulary + the two think tags


def test_tokenizer_rejects_a_vocabulary_below_the_byte_alphabet() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        tiny.train_tokenizer(["abc"], 100)


def test_tiny_qwen_builds_deterministically(tokenizer: Any) -> None:
    cfg = TinyModel()
    model = tiny.build_tiny_qwen(tokenizer, cfg, seed=0)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.head_dim * cfg.num_heads == cfg.hidden_size
    ids = tokenizer(["Compute 1 + 2."], return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape == (*ids.shape, len(tokenizer))
    same = tiny.build_tiny_qwen(tokenizer, cfg, seed=0)
    other = tiny.build_tiny_qwen(tokenizer, cfg, seed=1)
    w = model.model.embed_tokens.weight
    assert torch.equal(w, same.model.embed_tokens.weight)
    assert not torch.equal(w, other.model.embed_tokens.weight)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (TinyModel(hidden_size=60, num_heads=8), "hidden_size"),
        (TinyModel(num_heads=4, num_kv_heads=3), "num_kv_heads"),
    ],
)
def test_tiny_qwen_rejects_inconsistent_heads(tokenizer: Any, cfg: TinyModel, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny.build_tiny_qwen(tokenizer, cfg, seed=0)


def _think_steps(completion: str) -> int:
    if not completion.startswith("<think>") or "</think>" not in completion:
        return 0
    return len(extract_steps(completion, StructureRewardConfig()).texts)


@pytest.mark.slow
def test_warm_start_learns_the_structured_format(tokenizer: Any) -> None:
    """150 SFT steps (~10-20 s on 2 CPU cores) teach <think> steps and a boxed answer."""
    train, held_out = train_eval_split("arithmetic", 2048, 12, seed=5, difficulty=2)
    model = tiny.build_tiny_qwen(tokenizer, TinyModel(), seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    # No wall-clock bound: the suite runs on busy machines (159 s seen on a loaded one); `make
    # bench` is where speed is measured.
    metrics = tiny.warm_start(
        model,
        tokenizer,
        train,
        WarmStart(steps=150),
        seed=0,
        prompt_template=TEMPLATE,
        max_response_tokens=96,
        progress=False,
    )
    assert metrics["sft_steps"] == 150
    assert metrics["sft_loss_last"] < 0.3 * metrics["sft_loss_first"]
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert not model.training

    prompts = [TEMPLATE.format(question=p.question) for p in held_out]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=96, do_sample=False)
    completions = tokenizer.batch_decode(
        out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
    )
    well_formed = [c for c in completions if _think_steps(c) >= 2 and extract_answer(c) is not None]
    # Correctness is not asserted: a 100k-parameter model barely computes after 150 steps.
    assert len(well_formed) > len(prompts) // 2, completions


def test_warm_start_with_zero_steps_trains_nothing(tokenizer: Any) -> None:
    model = tiny.build_tiny_qwen(tokenizer, TinyModel(), seed=0)
    metrics = tiny.warm_start(
        model, tokenizer, [], WarmStart(steps=0), seed=0, prompt_template=TEMPLATE
    )
    assert metrics == {"sft_steps": 0.0, "sft_seconds": 0.0}


def test_prepare_tiny_policy_saves_once_and_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = DataSpec(task="countdown", difficulty=2, eval_size=8)
    model_spec = ModelSpec(warm_start=WarmStart(steps=3, batch_size=4))
    path = tiny.prepare_tiny_policy(data, model_spec, cache_dir=tmp_path, seed=0, progress=False)
    assert path.parent == tmp_path and path.name.startswith("tiny-")
    # no temporary directory left (the build lock stays: deleting a flock file races)
    assert [p.name for p in tmp_path.iterdir() if p.suffix != ".lock"] == [path.name]
    meta = tiny.read_metadata(path)
    assert meta["metrics"]["sft_steps"] == 3.0 and meta["task"] == "countdown"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert tok.padding_side == "left" and len(tok) == model.config.vocab_size

    # A concurrent writer that finished first wins; a foreign directory in the way is an error.
    tiny._save_atomically(path, model, tok, {"other": "writer"})
    assert tiny.read_metadata(path)["task"] == "countdown"
    (tmp_path / "tiny-foreign").mkdir()
    (tmp_path / "tiny-foreign" / "x").write_text("x", encoding="utf-8")
    with pytest.raises(OSError):
        tiny._save_atomically(tmp_path / "tiny-foreign", model, tok, {})
    names = sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".lock")
    assert names == sorted([path.name, "tiny-foreign"])

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("warm start ran again")

    monkeypatch.setattr(tiny, "warm_start", fail)
    # train_size does not change the policy: the same directory is reused.
    again = DataSpec(task="countdown", difficulty=2, eval_size=8, train_size=7)
    assert tiny.prepare_tiny_policy(again, model_spec, cache_dir=tmp_path, seed=0) == path
    assert tiny.cache_key(data, model_spec, 1) != tiny.cache_key(data, model_spec, 0)
    assert tiny.cache_key(data, model_spec, 0, 96) != tiny.cache_key(data, model_spec, 0)


def test_prepare_tiny_policy_for_a_dataset_task(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"question": "What is 6 * 7?", "answer": "42"}\n', encoding="utf-8")
    data = DataSpec(task="dataset", dataset=str(dataset), difficulty=1)
    spec = ModelSpec(warm_start=WarmStart(steps=2, batch_size=2))
    path = tiny.prepare_tiny_policy(data, spec, cache_dir=tmp_path / "c", seed=0, progress=False)
    assert tiny.read_metadata(path)["task"] == "dataset"
    missing = DataSpec(task="dataset", dataset="s3://bucket/d.jsonl")
    with pytest.raises(ValueError, match="not a local file"):
        tiny.prepare_tiny_policy(missing, spec, cache_dir=tmp_path / "c", seed=0)


def test_the_warm_start_trains_on_one_torch_thread_and_restores_the_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy 2-core machine two intra-op threads made the demo's warm start burn several
    times the CPU of one (issue 40 item 9): it runs on one and gives the caller's count back.
    The real warm start runs; the wrapper only records the thread count it ran with."""
    seen: list[int] = []
    real = tiny.warm_start

    def recording(*args: Any, **kwargs: Any) -> dict[str, float]:
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(tiny, "warm_start", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        spec = ModelSpec(warm_start=WarmStart(steps=2, batch_size=2))
        data = DataSpec(difficulty=1, eval_size=2)
        tiny.prepare_tiny_policy(data, spec, cache_dir=tmp_path, seed=0, progress=False)
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
