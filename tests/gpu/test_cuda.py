"""What must hold on a CUDA device: the embedders and the warm start give the CPU's results there.

GPU-marked (``pytest -m gpu``; skipped where torch sees no CUDA device, see tests/conftest.py).
``tests/gpu/check.py`` runs them on the GPU machine; on CI they are skipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

STEPS = [
    "First, add 17 and 25 to get 42.",
    "Then multiply the result by 3 to get 126.",
    "Check: 126 / 3 = 42, so the product is right.",
    "Let x be the number of apples, so 2x + 5 = 19.",
    "Subtract 5 from both sides: 2x = 14 and x = 7.",
    "Wait, the question asks for the total, not x.",
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


@pytest.mark.gpu
def test_the_bundled_embedder_on_cuda_gives_the_cpu_vectors() -> None:
    pytest.importorskip("sentence_transformers")
    from sarl.embedding.factory import EmbedderConfig, make_embedder

    cpu = make_embedder(EmbedderConfig(kind="local", device="cpu")).embed(STEPS)
    gpu = make_embedder(EmbedderConfig(kind="local", device="cuda")).embed(STEPS)
    assert gpu.shape == cpu.shape == (len(STEPS), 384)
    assert _cosines(gpu, cpu).min() > 0.999


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in policy, warm-started on the GPU for a few steps."""
    from sarl.runner.tiny import prepare_tiny_policy
    from sarl.spec.experiment import DataSpec, ModelSpec

    model = ModelSpec.model_validate({"warm_start": {"steps": 20, "max_response_tokens": 64}})
    data = DataSpec.model_validate({"task": "arithmetic", "train_size": 64, "eval_size": 4})
    return prepare_tiny_policy(data, model, cache_dir=tmp_path_factory.mktemp("policy"))


@pytest.mark.gpu
def test_the_warm_start_trains_on_the_gpu(tiny_policy: Path) -> None:
    from sarl.runner.tiny import read_metadata

    meta = read_metadata(tiny_policy)
    assert meta["warm_start_device"].startswith("cuda")
    assert meta["metrics"]["sft_loss_last"] < meta["metrics"]["sft_loss_first"]


@pytest.mark.gpu
def test_policy_hidden_states_on_cuda_match_the_cpu(tiny_policy: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sarl.embedding.policy import PolicyEmbedder
    from sarl.rewards.structure.config import StructureRewardConfig

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_policy))
    text = "<think>\n1 + 2 = 3\n\n3 * 4 = 12\n\n12 - 5 = 7\n</think>\n\\boxed{7}"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    response = tokenizer.decode(ids, skip_special_tokens=True)
    vectors = {}
    for device in ("cpu", "cuda"):
        model = AutoModelForCausalLM.from_pretrained(str(tiny_policy)).to(device)
        embedder = PolicyEmbedder(batch_size=4)
        embedder.bind(model, tokenizer)
        (done,) = embedder.embed_completions(
            ["What is (1 + 2) * 4 - 5?"], [ids], [response], StructureRewardConfig()
        )
        assert len(done.texts) == 3
        vectors[device] = done.vectors
    assert _cosines(vectors["cuda"], vectors["cpu"]).min() > 0.999
