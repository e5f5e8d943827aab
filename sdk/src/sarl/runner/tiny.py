"""The built-in ``builtin:tiny-qwen`` policy: tokenizer, model and SFT warm start, from scratch.

Called by the local runner (``sarl run --local``) through ``prepare_tiny_policy``, which returns
a directory that ``from_pretrained`` loads like any Hugging Face model. Nothing is downloaded:

1. ``train_tokenizer``: a byte-level BPE trained on the task corpus (digits split one per token,
   so numbers are learnable; ``<think>``/``</think>`` as single tokens that decoding keeps).
2. ``build_tiny_qwen``: a randomly initialised Qwen3 model of ``spec.model.tiny`` size.
3. ``warm_start``: SFT on prompt + structured trace (loss on the trace only), so that the policy
   already writes ``<think>`` steps and a ``\\boxed{}`` answer before RL shapes the structure.

torch, transformers and tokenizers are imported inside the functions (the sdk core has no torch).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sarl.runner.threads import one_torch_thread
from sarl.spec.experiment import DataSpec, ModelSpec, TinyModel, WarmStart
from sarl.tasks.generators import (
    TASKS,
    Problem,
    load_dataset_file,
    make_problems,
    train_eval_split,
)
from sarl.tasks.traces import corpus, structured_trace

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

#: Bump when the tokenizer, model or trace recipe changes, so cached warm starts are rebuilt.
RECIPE_VERSION = 3
#: Written last into a prepared directory; its presence marks the directory complete.
METADATA_FILE = "sarl_tiny.json"
SPECIAL_TOKENS = {
    "pad_token": "<|pad|>",
    "eos_token": "<|endoftext|>",
    "bos_token": "<|bos|>",
    "unk_token": "<|unk|>",
}
THINK_TOKENS = ("<think>", "</think>")
# Pre-tokenizer pieces: newline runs (so "\n\n", the step delimiter, can become one token), words
# with one optional leading space, single digits (no multi-digit tokens: arithmetic stays
# learnable), punctuation runs with an optional space, other whitespace.
_PIECES = r"\n+|[^\S\n]?\p{L}+|\p{N}|[^\S\n]?[^\s\p{L}\p{N}]+|[^\S\n]+"
_WARM_POOL = 2048  # distinct warm-start problems (fewer when the task has fewer at its difficulty)
_BUCKET = 8  # batches drawn at once and sorted by length (less padding)
_TRACE_DRAWS = 4  # redraws of a trace that exceeds the response budget


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts`` (any text stays encodable).

    ``vocab_size`` counts the 256 byte symbols and the special tokens; the think tags are added on
    top. Padding is on the left (generation batches); ``decode(encode(x)) == x`` for any ``x``.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(SPECIAL_TOKENS.values())
    if vocab_size < 256 + len(specials):
        raise ValueError(f"vocab_size: {vocab_size} is below the 256 bytes + special tokens")
    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PIECES), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    # Not special: skip_special_tokens=True must keep the reasoning tags (the structure reward
    # segments what is between them), as in Qwen3's tokenizer.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        **SPECIAL_TOKENS,
    )


def build_tiny_qwen(
    tokenizer: PreTrainedTokenizerFast,
    cfg: TinyModel,
    *,
    seed: int,
    max_position_embeddings: int = 2048,
) -> PreTrainedModel:
    """A randomly initialised ``Qwen3ForCausalLM`` (tied embeddings) sized by ``cfg``.

    ``max_position_embeddings`` must cover prompt + response; RoPE has no learned positions, so
    the default only sizes the rotary cache. The global torch RNG is left untouched.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(
            f"model.tiny.hidden_size: {cfg.hidden_size} is not divisible by num_heads "
            f"{cfg.num_heads}"
        )
    if cfg.num_heads % cfg.num_kv_heads:
        raise ValueError(
            f"model.tiny.num_kv_heads: {cfg.num_kv_heads} does not divide num_heads {cfg.num_heads}"
        )
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.hidden_size // cfg.num_heads,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def _encode(
    tokenizer: PreTrainedTokenizerFast,
    problem: Problem,
    rng: random.Random,
    prompt_template: str,
    max_response_tokens: int | None,
) -> tuple[list[int], list[int]]:
    """Prompt ids and completion ids (trace + eos) of one SFT example.

    With ``max_response_tokens``, a trace that would not fit is redrawn (the structure is random)
    and the shortest of a few draws is kept, so the model learns to finish within the budget RL
    generation will give it.
    """
    eos = tokenizer.eos_token_id

    def draw() -> list[int]:
        ids = tokenizer(structured_trace(problem, rng), add_special_tokens=False)["input_ids"]
        return [*ids, eos]

    best = draw()
    for _ in range(_TRACE_DRAWS - 1):
        if max_response_tokens is None or len(best) <= max_response_tokens:
            break
        best = min(best, draw(), key=len)
    prompt = tokenizer(prompt_template.format(question=problem.question), add_special_tokens=False)
    return list(prompt["input_ids"]), best


def _collate(rows: Sequence[tuple[list[int], list[int]]], pad: int) -> dict[str, torch.Tensor]:
    """Right-padded prompt + completion; labels are -100 on the prompt and the padding."""
    import torch

    width = max(len(p) + len(c) for p, c in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)  # (batch, seq)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)  # (batch, seq)
    attention = torch.zeros((len(rows), width), dtype=torch.long)  # (batch, seq)
    for i, (prompt, completion) in enumerate(rows):
        n = len(prompt) + len(completion)
        input_ids[i, :n] = torch.tensor(prompt + completion)
        labels[i, len(prompt) : n] = torch.tensor(completion)
        attention[i, :n] = 1
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def _batches(
    tokenizer: PreTrainedTokenizerFast,
    problems: Sequence[Problem],
    batch_size: int,
    rng: random.Random,
    prompt_template: str,
    max_response_tokens: int | None,
) -> Iterator[dict[str, torch.Tensor]]:
    """Endless SFT batches: epochs over ``problems`` in shuffled order, a fresh trace each time.

    Examples are drawn ``_BUCKET`` batches at a time and batched by length: training time is
    proportional to padded tokens on CPU, and this cuts padding from ~18% to ~3% of the tokens.
    """
    order = list(problems)
    pos = len(order)
    while True:
        chunk: list[Problem] = []
        while len(chunk) < batch_size * _BUCKET:
            if pos == len(order):
                rng.shuffle(order)
                pos = 0
            chunk.append(order[pos])
            pos += 1
        rows = [_encode(tokenizer, p, rng, prompt_template, max_response_tokens) for p in chunk]
        rows.sort(key=lambda r: len(r[0]) + len(r[1]))
        groups = [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]
        rng.shuffle(groups)
        for group in groups:
            yield _collate(group, tokenizer.pad_token_id)


def _lr_factor(steps: int) -> Any:
    """Linear warm-up over the first 5% of steps, then cosine decay to 10% of the peak."""
    warmup = max(1, steps // 20)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    problems: Sequence[Problem],
    cfg: WarmStart,
    *,
    seed: int,
    prompt_template: str,
    max_response_tokens: int | None = None,
    progress: bool = True,
) -> dict[str, float]:
    """SFT ``model`` in place on ``prompt_template.format(question=...)`` + a structured trace.

    Batches of ``cfg.batch_size`` go through the problems in shuffled epochs with a fresh trace
    each time (varied structure); traces longer than ``max_response_tokens`` (eos included) are
    redrawn where possible. Loss on the trace tokens only; AdamW, 5% warm-up then cosine LR,
    gradient clipping at 1. Returns ``sft_loss_first`` (first step), ``sft_loss_last`` (mean of
    the last 10 steps, less noisy than one batch), ``sft_steps`` and ``sft_seconds``;
    ``cfg.steps == 0`` trains nothing and returns only the last two. Leaves the model in eval mode.
    """
    import torch

    from sarl.progress import progress_bar

    if cfg.steps == 0:
        return {"sft_steps": 0.0, "sft_seconds": 0.0}
    usable = [p for p in problems if p.steps]
    if not usable:
        raise ValueError("warm_start: no problem has solution steps to build traces from")
    rng = random.Random(f"warm-start:{seed}")
    batches = _batches(tokenizer, usable, cfg.batch_size, rng, prompt_template, max_response_tokens)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.learning_rate, betas=(0.9, 0.95), weight_decay=0.01
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(cfg.steps))
    losses: list[float] = []
    start = time.perf_counter()
    model.train()
    device = next(model.parameters()).device  # the batches are built on the CPU
    bar = progress_bar(range(cfg.steps), desc="warm start (SFT)", enabled=progress, unit="step")
    for _ in bar:
        loss = model(**{k: v.to(device) for k, v in next(batches).items()}).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)  # drawn with the next step
    model.eval()  # type: ignore[no-untyped-call]
    tail = losses[-10:]
    return {
        "sft_loss_first": losses[0],
        "sft_loss_last": sum(tail) / len(tail),
        "sft_steps": float(cfg.steps),
        "sft_seconds": time.perf_counter() - start,
    }


def _dataset_digest(data: DataSpec) -> str | None:
    if data.task != "dataset" or data.dataset is None:
        return None
    path = Path(data.dataset)
    if not path.is_file():
        raise ValueError(
            f"data.dataset: {data.dataset!r} is not a local file; the built-in model reads local "
            "dataset files only (download s3:// datasets first)"
        )
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_key(
    data: DataSpec, model: ModelSpec, seed: int, max_response_tokens: int | None = None
) -> str:
    """Hash of everything that changes the prepared policy (not e.g. ``data.train_size``)."""
    fields = {
        "recipe": RECIPE_VERSION,
        "task": data.task,
        "dataset": _dataset_digest(data),
        "question_field": data.question_field,
        "difficulty": data.difficulty,
        "split_seed": data.split_seed,
        "eval_size": data.eval_size,
        "prompt_template": data.prompt_template,
        "tiny": model.tiny.model_dump(mode="json"),
        "warm_start": model.warm_start.model_dump(mode="json"),
        "seed": seed,
        "max_response_tokens": max_response_tokens,
    }
    blob = json.dumps(fields, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _warm_problems(data: DataSpec) -> tuple[list[Problem], list[str]]:
    """Warm-start problems (none of them held out) and extra tokenizer texts.

    A generated task warm-starts on its own problems at the spec's difficulty, excluding the
    held-out questions (they are the first ``eval_size`` of the eval stream, as in
    ``train_eval_split``). A dataset task has no solution paths: it warm-starts on arithmetic for
    the format only, and its questions join the tokenizer corpus.
    """
    if data.task in TASKS:
        _, held_out = train_eval_split(
            data.task, 0, data.eval_size, seed=data.split_seed, difficulty=data.difficulty
        )
        exclude = [p.question for p in held_out]
        pool = make_problems(
            data.task,
            _WARM_POOL,
            seed=data.split_seed,
            difficulty=data.difficulty,
            exclude=exclude,
            strict=False,
        )
        return pool, []
    if data.dataset is None:
        raise ValueError("data.dataset: required when task is 'dataset'")
    rows = load_dataset_file(data.dataset, data.question_field, data.answer_field)
    pool = make_problems(
        "arithmetic", _WARM_POOL, seed=data.split_seed, difficulty=data.difficulty, strict=False
    )
    return pool, [data.prompt_template.format(question=p.question) for p in rows]


def prepare_tiny_policy(
    data_spec: DataSpec,
    model_spec: ModelSpec,
    *,
    cache_dir: Path,
    seed: int | None = None,
    max_response_tokens: int | None = None,
    progress: bool = True,
) -> Path:
    """Build, warm-start and save the tiny policy; reuse it when already prepared.

    The directory is ``cache_dir/tiny-<cache_key>``, holding the model, the tokenizer and
    ``METADATA_FILE`` (the hashed fields and the warm-start metrics, see ``read_metadata``). It is
    written to a temporary directory and renamed into place, so a directory that exists is
    complete; when two processes race, the first rename wins and the other reuses it. Pass the
    RL response budget (``algorithm.max_response_length``) as ``max_response_tokens`` so the
    warm-start traces fit it (see ``warm_start``). ``seed`` defaults to
    ``model_spec.warm_start.seed``: the starting policy does not depend on the RL seed, so the
    seeds of a Study start from one warm start, as RL runs from one pretrained checkpoint do.
    """
    if seed is None:
        seed = model_spec.warm_start.seed
    max_response_tokens = model_spec.warm_start.max_response_tokens or max_response_tokens
    key = cache_key(data_spec, model_spec, seed, max_response_tokens)
    target = Path(cache_dir) / f"tiny-{key}"
    if (target / METADATA_FILE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One builder per policy: parallel runs of a Study wait for it instead of each spending
    # the warm start's minutes on the same model (the lock is released if the builder dies).
    with _file_lock(target.parent / f".tiny-{key}.lock"):
        if (target / METADATA_FILE).is_file():
            return target
        from sarl.progress import transformers_bars_off

        with transformers_bars_off():
            return _prepare(target, key, data_spec, model_spec, seed, max_response_tokens, progress)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (POSIX ``flock``; a no-op where it is missing)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic rename below still keeps the cache consistent
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _prepare(
    target: Path,
    key: str,
    data_spec: DataSpec,
    model_spec: ModelSpec,
    seed: int,
    max_response_tokens: int | None,
    progress: bool,
) -> Path:
    """Build, warm-start and save the policy into ``target`` (see ``prepare_tiny_policy``)."""
    problems, extra_texts = _warm_problems(data_spec)
    rng = random.Random(f"tokenizer:{seed}")
    prompts = [data_spec.prompt_template.format(question=p.question) for p in problems]
    tokenizer = train_tokenizer(
        corpus(problems, rng) + prompts + extra_texts, model_spec.tiny.vocab_size
    )
    model = build_tiny_qwen(tokenizer, model_spec.tiny, seed=seed)
    device = warm_start_device()
    model.to(device)  # type: ignore[arg-type]  # transformers' stub types .to() oddly
    with one_torch_thread():  # sarl.runner.threads: why one
        metrics = warm_start(
            model,
            tokenizer,
            problems,
            model_spec.warm_start,
            seed=seed,
            prompt_template=data_spec.prompt_template,
            max_response_tokens=max_response_tokens,
            progress=progress,
        )
    meta = {
        "cache_key": key,
        "recipe": RECIPE_VERSION,
        "seed": seed,
        "task": data_spec.task,
        "warm_start_problems": len(problems),
        "metrics": metrics,
        "warm_start_device": device,
    }
    model.to("cpu")  # type: ignore[arg-type]  # saved from the CPU, wherever it trained
    _save_atomically(target, model, tokenizer, meta)
    return target


def warm_start_device() -> str:
    """Where the warm start trains: the current CUDA device when torch sees one (a GPU-sized
    built-in policy would take hours of SFT on a CPU), else the CPU. Only the speed differs; the
    cache key does not include it."""
    import torch

    return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"


def _save_atomically(
    target: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, meta: dict[str, Any]
) -> None:
    """Save into a temporary sibling, then rename; the metadata file is written last."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared (e.g. a volume)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / METADATA_FILE).is_file():
                raise
            # Another process prepared the same policy first: keep its directory.
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a no-op after a successful rename


def read_metadata(path: Path) -> dict[str, Any]:
    """The metadata ``prepare_tiny_policy`` stored with a prepared policy (incl. ``metrics``)."""
    loaded: dict[str, Any] = json.loads((Path(path) / METADATA_FILE).read_text(encoding="utf-8"))
    return loaded
