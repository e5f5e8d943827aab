"""Mean-pooled hidden states of a causal LM at one layer: the step vectors of SARL v1 A.1 (A).

Called by the two causal-LM embedders: :mod:`sarl.embedding.hf_causal` (a fixed local model,
one step string per sequence) and :mod:`sarl.embedding.policy` (the policy being trained, one
prompt + completion per sequence). Each step's vector is e_t = (1/L_t) sum_j h^l_{t,j}, the mean
of layer l's hidden states over the step's L_t tokens (SARL v1, Appendix A.1, Implementation A),
then scaled to unit norm (SARL v2 §3.2).

**Which layer.** The paper leaves l open ("the token hidden states from layer l"). The default
here is the middle of the stack, ``num_hidden_layers // 2`` (``layer: "middle"``): the last layer
of a causal LM is trained to predict the *next* token, so its states describe what follows a
position more than the position's content, while studies of decoder LMs find that intermediate
layers carry the most general-purpose sentence representations (Skean et al., 2025, "Layer by
Layer: Uncovering Hidden Representations in Language Models"; Liu et al., 2024, "Fantastic
Semantics and Where to Find Them"). ``layer`` indexes ``hidden_states`` as Hugging Face returns
them: 0 is the token embeddings, i the output of decoder layer i, ``num_hidden_layers`` the last
(after the final norm); negative values count from the end (-1 is the last layer).

torch is imported inside the functions: the reward core imports this package without torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from sarl.embedding.base import EmbeddingError, FloatArray, normalize_rows

LayerChoice = int | Literal["middle"]
#: The default layer: the middle of the stack (see the module docstring for why).
DEFAULT_LAYER: LayerChoice = "middle"

Positions = npt.NDArray[np.intp]


def num_hidden_layers(model: Any) -> int:
    """The decoder depth from the model's (text) config."""
    config = model.config
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or layers < 1:
        raise EmbeddingError(
            f"embedder.layer: {type(model).__name__}'s config has no num_hidden_layers"
        )
    return layers


def resolve_layer(layer: LayerChoice, num_layers: int) -> int:
    """The ``hidden_states`` index (0..num_layers) that ``layer`` names; EmbeddingError naming
    the field when it is out of range (known only once the model is)."""
    if layer == "middle":
        return num_layers // 2
    if not -(num_layers + 1) <= layer <= num_layers:
        raise EmbeddingError(
            f"embedder.layer: {layer} is out of range for a model with {num_layers} layers "
            f"(0..{num_layers}, or -{num_layers + 1}..-1 from the end)"
        )
    return layer % (num_layers + 1)


@contextmanager
def inference_mode(model: Any) -> Iterator[None]:
    """Every module in eval mode and no autograd inside; each module's own mode restored after.

    Restoring module by module (not ``model.train(was_training)``) keeps submodules that were
    deliberately in eval mode (frozen parts) as they were.
    """
    import torch

    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, training in modes:
            module.training = training


def pool_layer(
    model: Any,
    sequences: Sequence[Sequence[int]],
    pools: Sequence[Sequence[Positions]],
    *,
    layer: int,
    batch_size: int,
    pad_id: int,
) -> list[FloatArray]:
    """Per sequence, one unit-norm row per pool: the mean of layer ``layer`` over its positions.

    ``sequences`` are token ids run through ``model`` ``batch_size`` at a time, right-padded with
    an attention mask (so a sequence's states do not depend on its batch-mates, up to float
    rounding); ``pools[i]`` are position arrays into ``sequences[i]``. Runs under
    :func:`inference_mode`. Every batch runs a forward pass, even one whose sequences have no
    pools: under FSDP every rank must make the same number of forward calls.
    """
    import torch

    out: list[FloatArray | None] = [None] * len(sequences)
    # Similar lengths together: less padding; the result does not depend on the order.
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    device = _device(model)
    extra = _forward_kwargs(model)
    with inference_mode(model):
        for lo in range(0, len(order), batch_size):
            chunk = order[lo : lo + batch_size]
            width = max(1, *(len(sequences[i]) for i in chunk))
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)  # (batch, width)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)  # (batch, width)
            for row, i in enumerate(chunk):
                ids[row, : len(sequences[i])] = torch.tensor(list(sequences[i]), dtype=torch.long)
                mask[row, : len(sequences[i])] = 1
            states = _layer_states(model, ids.to(device), mask.to(device), layer, extra)
            for row, i in enumerate(chunk):
                out[i] = _mean_rows(states[row], pools[i], source=f"sequence {i}")
    return [o if o is not None else np.zeros((0, 0), np.float32) for o in out]


def _layer_states(
    model: Any, ids: Any, mask: Any, layer: int, extra: dict[str, Any]
) -> Any:  # (batch, width, dim)
    outputs = model(
        input_ids=ids,
        attention_mask=mask,
        # transformers >= 5 keeps only the listed index (the others come back as None); older
        # models read the list as True and return every layer: indexing works the same way.
        output_hidden_states=[layer],
        use_cache=False,
        return_dict=True,
        **extra,
    )
    hidden = getattr(outputs, "hidden_states", None)
    if hidden is None or layer >= len(hidden) or hidden[layer] is None:
        raise EmbeddingError(
            f"embedder.layer: {type(model).__name__} returned no hidden states at index {layer}"
        )
    return hidden[layer]


def _mean_rows(states: Any, pools: Sequence[Positions], *, source: str) -> FloatArray:
    """(len(pools), dim) unit rows: the mean of ``states`` (width, dim) over each pool."""
    import torch

    if not pools:
        return np.zeros((0, int(states.shape[-1])), dtype=np.float32)
    rows = []
    for positions in pools:
        if positions.size == 0:
            raise EmbeddingError(f"{source}: a step has no tokens to pool")
        index = torch.as_tensor(positions, dtype=torch.long, device=states.device)
        rows.append(states.index_select(0, index).float().mean(dim=0))  # (dim,)
    pooled = torch.stack(rows).cpu().numpy()  # (len(pools), dim)
    return normalize_rows(pooled, source=source)


def _device(model: Any) -> Any:
    device = getattr(model, "device", None)
    if device is None:
        device = next(model.parameters()).device
    return device


def _forward_kwargs(model: Any) -> dict[str, Any]:
    """``logits_to_keep=1`` where the model takes it: the full (batch, width, vocab) logits are
    never used here and are the largest tensor of the pass for a large vocabulary."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}
