"""k sampled responses per chat prompt: vLLM on a GPU, Hugging Face ``generate`` on CPU.

Called by the evaluation job (``sarl_jobs.evaluate``) through :func:`make_generator`. Both
backends render a prompt the same way (:func:`render_prompt`): the tokenizer's chat template
with the generation prompt appended when it has one (as verl does for training prompts), else
the messages' contents joined by blank lines (the built-in tiny policy has no chat template and
was trained on the bare prompt text). The HF path reuses the local runner's
:func:`sarl.runner.evaluate.generate_samples` in chunks, with a tqdm bar. torch, transformers
and vLLM are imported on use.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

Backend = Literal["auto", "vllm", "hf"]
Messages = list[dict[str, str]]


class Generator(Protocol):
    """``k`` responses per prompt; also exposes how the prompts were rendered."""

    def render(self, messages: Messages) -> str: ...

    def __call__(
        self, prompts: Sequence[str], *, k: int, max_new_tokens: int, temperature: float
    ) -> list[list[str]]: ...


def render_prompt(tokenizer: Any, messages: Messages) -> str:
    """The prompt text the model sees (see the module docstring)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return str(text)
    return "\n\n".join(m["content"] for m in messages)


def vllm_usable() -> bool:
    """vLLM is installed and torch sees a CUDA device."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


class HFGenerator:
    """CPU (or single-GPU) sampling with ``model.generate``, ``chunk`` prompts at a time."""

    def __init__(
        self, model_dir: str, *, dtype: str = "float32", seed: int = 0, progress: bool = True,
        batch_size: int = 32,
    ) -> None:  # fmt: skip
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"  # decoder-only generation pads on the left
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        self.seed, self.progress, self.batch_size = seed, progress, batch_size

    def render(self, messages: Messages) -> str:
        return render_prompt(self.tokenizer, messages)

    def __call__(
        self, prompts: Sequence[str], *, k: int, max_new_tokens: int, temperature: float
    ) -> list[list[str]]:
        import torch

        from sarl.progress import progress_bar
        from sarl.runner.evaluate import generate_samples

        torch.manual_seed(self.seed)
        chunk = max(1, self.batch_size // k)
        out: list[list[str]] = []
        starts = range(0, len(prompts), chunk)
        for start in progress_bar(starts, desc="generating", unit="batch", enabled=self.progress):
            out += generate_samples(
                self.model, self.tokenizer, prompts[start : start + chunk], k=k,
                max_new_tokens=max_new_tokens, temperature=temperature, batch_size=chunk * k,
            )  # fmt: skip
        return out


class VLLMGenerator:
    """GPU sampling with vLLM's offline ``LLM.generate`` (``n=k`` samples per prompt).

    Not exercised by the CPU test suite (no CUDA there); vLLM shows its own progress bar.
    """

    def __init__(self, model_dir: str, *, dtype: str = "bfloat16", seed: int = 0) -> None:
        import torch
        from vllm import LLM  # type: ignore[import-not-found]

        self.llm = LLM(
            model=model_dir, dtype=dtype, seed=seed,
            tensor_parallel_size=max(1, torch.cuda.device_count()),
        )  # fmt: skip
        self.tokenizer = self.llm.get_tokenizer()
        self.seed = seed

    def render(self, messages: Messages) -> str:
        return render_prompt(self.tokenizer, messages)

    def __call__(
        self, prompts: Sequence[str], *, k: int, max_new_tokens: int, temperature: float
    ) -> list[list[str]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=k, temperature=temperature, max_tokens=max_new_tokens, seed=self.seed
        )
        outputs = self.llm.generate(list(prompts), params, use_tqdm=True)
        return [[c.text for c in o.outputs] for o in outputs]


def make_generator(
    model_dir: str | Path, *, backend: Backend = "auto", dtype: str = "float32", seed: int = 0,
    progress: bool = True,
) -> Generator:  # fmt: skip
    """vLLM when ``backend`` is ``vllm`` (or ``auto`` and :func:`vllm_usable`), else HF."""
    if backend == "vllm" or (backend == "auto" and vllm_usable()):
        return VLLMGenerator(str(model_dir), dtype=dtype, seed=seed)
    return HFGenerator(str(model_dir), dtype=dtype, seed=seed, progress=progress)
