"""Registry entry ``"tag_maxflow"``: the MAX-Flow reward of tagged reasoning (§3.2, eqs. 2–3).

Imported lazily by ``sarl.rewards.registry``; used by the adapters. Three layers, kept apart:

* Pure numpy (and scipy for max-flow): :func:`step_matrix` turns one layer's token attentions into
  the step-to-step matrix of eq. (2); :func:`flow_quality` builds the flow graph, the importance
  ΔF_k of every step by node removal and the balance Q of eq. (3).
* :func:`step_attention`: runs a Hugging Face causal LM on ``prompt + completion`` and returns the
  eq. (2) matrix of its nodes. torch and transformers are imported inside it, so the reward core
  never imports torch.
* :class:`TagMaxFlowReward`: loads the model once, on first use, and scores each completion by Q.
  Truncated completions are masked (A.7), and so are completions with more than ``max_steps``
  tagged steps (default 256): ΔF costs one max-flow per step that carries flow, each over a
  graph of up to n^2 edges, so a runaway completion must not stall the batch (issue 12).

Truncation masking (A.7 masks truncated completions from the reward *and* the gradient): the
reward reads ``Sample.extra["truncated"]`` (or counts tokens against ``max_completion_tokens``)
and scores such a completion ``truncated_score`` (NaN by default). ``masks_truncated`` tells the
adapters to supply the flag and the trainers to mask the loss:

* TRL: the adapter sets the flag from ``completion_ids`` with TRL's own rule (no EOS or pad
  token at the end, ``GRPOTrainer._generate_and_score_completions``) once
  :func:`sarl.integrations.trl.bind_trainer` has given it the trainer's stop ids; the NaN score
  becomes ``None`` (TRL leaves the reward out for that sample), and the local runner and the TRL
  job turn on ``GRPOConfig.mask_truncated_completions`` whenever the spec has a reward with
  ``masks_truncated`` (``sarl.runner.trl_config``), so the completion gets no gradient either.
* verl 0.9.1 has no switch that drops truncated responses from the loss (its
  ``response_length/clip_ratio`` metric only counts them), and its rewards must be numbers. The
  spec builder sends such rewards through ``SarlRewardManager``, which sets the flag from the
  response tokens, and requires a numeric ``truncated_score``: on verl a truncated completion
  gets that score and is still trained on.

Nodes (§3.2 step 2): node 1 is the question (the whole prompt text the model saw), then the tagged
steps of the reasoning, and node n is the answer (the text after ``</think>``). Without an answer
the last step is the sink.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.sparse import csr_array  # type: ignore[import-untyped]
from scipy.sparse.csgraph import maximum_flow  # type: ignore[import-untyped]

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import register_reward
from sarl.rewards.tagged.tags import ParsedCompletion, parse_completion
from sarl.rewards.text import encodable

COMPONENT_KEYS = ("quality", "flow", "num_steps", "num_edges", "truncated")
DEFAULT_MAX_STEPS = 256
# scipy's maximum_flow casts capacities to 32-bit integers and silently wraps larger ones.
_INT32_MAX = 2**31 - 1


# --- eq. (2): step-to-step attention ---------------------------------------------------------


def token_spans(
    offsets: Sequence[tuple[int, int]], char_spans: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """``[start, end)`` token range of each character span: the tokens whose first character lies
    in it. Zero-width tokens (special tokens, offset ``(0, 0)``) belong to no span; a span without
    tokens gets ``(0, 0)``."""
    off = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)  # (tokens, 2)
    starts, real = off[:, 0], off[:, 1] > off[:, 0]  # (tokens,), (tokens,)
    out: list[tuple[int, int]] = []
    for lo, hi in char_spans:
        idx = np.flatnonzero(real & (starts >= lo) & (starts < hi))
        out.append((int(idx[0]), int(idx[-1]) + 1) if idx.size else (0, 0))
    return out


def step_matrix(attention: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """The step attention matrix A of eq. (2) from one layer's attentions ``(H, L, L)``.

    ``A_ij = 1/(H T_i) * sum_h sum_{a in T_i} max_{b in T_j} attn[h, a, b]`` (Dong & Fan §3.2,
    eq. 2): for each token of step i and each head, its strongest attention to any token of step
    j, averaged over heads and over the tokens of step i. Row i is "what step i reads". Spans are
    token ranges ``[start, end)``; an empty span has an all-zero row and column. Each row sums to
    at most 1 (the maxima over disjoint spans are bounded by the token's attention mass), and with
    causal attention ``A_ij = 0`` for ``j > i``.
    """
    attn = np.asarray(attention, dtype=np.float64)
    if attn.ndim != 3 or attn.shape[1] != attn.shape[2]:
        raise ValueError(f"attention: expected shape (heads, L, L), got {attn.shape}")
    heads, length, _ = attn.shape
    n = len(spans)
    col_max = np.zeros((heads, length, n))  # (H, L, n): max over each step's key tokens
    for j, (b0, b1) in enumerate(spans):
        if b1 > b0:
            col_max[:, :, j] = attn[:, :, b0:b1].max(axis=-1)
    per_token = col_max.mean(axis=0)  # (L, n): the 1/H sum over heads
    out = np.zeros((n, n))  # (n, n)
    for i, (a0, a1) in enumerate(spans):
        if a1 > a0:
            out[i] = per_token[a0:a1].mean(axis=0)  # the 1/T_i sum over the query tokens
    return out


def node_char_spans(
    prompt: str, completion: str, parsed: ParsedCompletion
) -> list[tuple[int, int]]:
    """Character spans in ``prompt + completion`` of the nodes: question, steps, answer.

    The question is the whole prompt; a step runs from its tag to the next tag (or to
    ``</think>``); the answer is the non-blank text after ``</think>`` (absent when empty).
    """
    shift = len(prompt)
    spans = [(0, shift)]
    spans.extend((shift + s.start, shift + s.end) for s in parsed.steps)
    if parsed.answer_span is not None and parsed.answer(completion):
        spans.append((shift + parsed.answer_span[0], shift + parsed.answer_span[1]))
    return spans


# --- §3.2 steps 2–4: flow graph, importance, eq. (3) ------------------------------------------


@dataclass(frozen=True, slots=True)
class FlowResult:
    """Max-flow diagnostics of one step matrix."""

    #: Q of eq. (3), in [0, 1].
    quality: float
    #: F, the max-flow from the first node (question) to the last (answer).
    flow: float
    #: ΔF_k of the intermediate nodes 1..n-2 (0-based), in node order.
    importance: tuple[float, ...]
    #: Edges of the thresholded graph.
    num_edges: int


def flow_graph(attention: np.ndarray, tau: float) -> np.ndarray:
    """Capacities ``cap[u, v]`` of edge u -> v: ``A_vu`` where ``A_vu > tau`` (§3.2 step 2).

    The paper writes edge (i, j) with capacity A_ij and sends flow from node 1 to node n; with
    causal attention A_ij is 0 above the diagonal, so taken literally no flow could ever reach a
    later step. A_ij means step i reads step j, i.e. information moves j -> i, so the edge is
    oriented that way (the same max-flow values as the literal graph with source and sink
    swapped). Self-attention (the diagonal) is not an edge.
    """
    a = np.asarray(attention, dtype=np.float64)
    cap = np.where(a > tau, a, 0.0).T.copy()  # (n, n): row = from, column = to
    np.fill_diagonal(cap, 0.0)
    return cap


def _max_flow(graph: Any, source: int, sink: int) -> Any:
    """scipy's max-flow result (``flow_value``, ``flow``) of an int32 CSR capacity graph."""
    return maximum_flow(graph, source, sink)


def node_importance(capacity: np.ndarray, scale: float = 1e6) -> tuple[float, list[float]]:
    """F and ``ΔF_k = F - F_{-k}`` for every intermediate node k (§3.2 step 3).

    Source is node 0, sink node n-1. scipy's max-flow (Dinic; same value as the paper's
    Ford-Fulkerson) needs integer capacities, so capacities are rounded to multiples of
    ``1/scale`` (1e-6 by default; F is off by at most ``edges / (2 * scale)``). ``scale`` is
    lowered when needed to keep the total capacity below 2**30 units, clear of int32 overflow.
    ΔF is taken in those integer units, so it is exactly >= 0 (removing a node never adds flow).

    Work (issue 12): a node that carries no flow in the maximum flow found has ΔF_k = 0 exactly
    (that flow avoids k, so it is feasible without k: F_{-k} >= F), so only nodes that carry
    flow cost a max-flow each, on one CSR graph built once. At most n - 1 max-flows.
    """
    n = capacity.shape[0]
    if n < 2:
        return 0.0, []
    total = float(capacity.sum())
    scale = min(scale, 0.5 * _INT32_MAX / total) if total > 0 else scale
    graph = csr_array(np.rint(capacity * scale).astype(np.int32))  # (n, n), built once
    full = _max_flow(graph, 0, n - 1)
    flow = int(full.flow_value)
    through = np.asarray(full.flow.maximum(0).sum(axis=0)).ravel()  # (n,): inflow of each node
    rows = np.repeat(np.arange(n), np.diff(graph.indptr))  # (edges,): tail of each stored edge
    deltas: list[float] = []
    for k in range(1, n - 1):
        if through[k] == 0:
            deltas.append(0.0)
            continue
        cut = graph.copy()
        cut.data[(rows == k) | (cut.indices == k)] = 0  # node k removed: no edge in or out
        deltas.append((flow - int(_max_flow(cut, 0, n - 1).flow_value)) / scale)
    return flow / scale, deltas


def balance_quality(importance: Sequence[float], top_share: float = 0.25) -> float:
    """Q = 1 - sum_{k in K_top} ΔF_k / sum_j ΔF_j (Dong & Fan §3.2, eq. 3).

    K_top holds the ``ceil(top_share * m)`` largest of the m importances (the top 25% of steps by
    default; at least one step when m >= 1). The sum runs over the intermediate steps, the only
    ones with a ΔF. Conventions: no intermediate step (m = 0) or zero total importance (no step
    carries any flow, e.g. the answer reads the question directly or not at all) gives Q = 0 —
    there is no balanced contribution to reward, and a reasoning the answer bypasses must not
    score the maximum.
    """
    values = np.sort(np.asarray(importance, dtype=np.float64))[::-1]  # (m,) descending
    total = float(values.sum())
    if values.size == 0 or total <= 0:
        return 0.0
    top = max(1, math.ceil(top_share * values.size - 1e-9))  # tolerance: 0.3 * 10 = 3.0000000004
    return 1.0 - float(values[:top].sum()) / total


def flow_quality(
    attention: np.ndarray, tau: float = 0.05, top_share: float = 0.25, scale: float = 1e6
) -> FlowResult:
    """MAX-Flow quality of a step matrix ``(n, n)`` (eq. 2): graph, F, ΔF_k and Q (eq. 3).

    Node 0 is the question (source), node n-1 the answer (sink). Fewer than 3 nodes leave no
    intermediate step: Q = 0 (see :func:`balance_quality`).
    """
    a = np.asarray(attention, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"attention: expected a square (n, n) step matrix, got {a.shape}")
    cap = flow_graph(a, tau)
    flow, deltas = node_importance(cap, scale)
    quality = balance_quality(deltas, top_share) if flow > 0 else 0.0
    return FlowResult(quality, flow, tuple(deltas), int(np.count_nonzero(cap)))


# --- model attentions (torch, imported lazily) -------------------------------------------------


class _StopForward(Exception):
    """Raised by the capture hook: the layers after the one we read need not run."""


def step_attention(
    model: Any,
    tokenizer: Any,
    prompt: str,
    completion: str,
    layer: int = -1,
    parsed: ParsedCompletion | None = None,
) -> np.ndarray:
    """The eq. (2) step matrix ``(n, n)`` of ``prompt + completion`` from one decoder layer.

    ``model`` is a Hugging Face causal LM loaded with ``attn_implementation="eager"`` (other
    attention kernels return no weights); ``tokenizer`` a fast tokenizer (offsets are needed to
    map steps to tokens). The text is tokenised without added special tokens, as TRL does: chat
    templates already contain them. Nodes are those of :func:`node_char_spans`.
    """
    import torch

    parsed = parse_completion(completion) if parsed is None else parsed
    enc = tokenizer(
        encodable(prompt + completion),  # tokenizers encode UTF-8: no lone surrogates
        return_offsets_mapping=True,
        add_special_tokens=False,
        return_tensors="pt",
    )
    offsets = enc.pop("offset_mapping")[0].tolist()  # (L, 2)
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
    with torch.inference_mode():
        attn = _layer_attention(model, inputs, layer)  # (H, L, L)
    spans = token_spans(offsets, node_char_spans(prompt, completion, parsed))
    return step_matrix(attn, spans)


def _layer_attention(model: Any, inputs: dict[str, Any], layer: int) -> np.ndarray:
    """Attention weights ``(H, L, L)`` of decoder layer ``layer`` (negative counts from the end).

    A forward hook on that layer's ``self_attn`` keeps only its weights and stops the forward
    pass: ``output_attentions=True`` would hold every layer's ``(H, L, L)`` (about 20 GB at 4K
    tokens for a 28-layer, 12-head model in fp32) and run the layers after it for nothing. Models
    without ``get_decoder().layers[i].self_attn`` fall back to ``output_attentions=True``.
    """
    layers = getattr(model.get_decoder(), "layers", None) if hasattr(model, "get_decoder") else None
    if layers is None or not hasattr(layers[0], "self_attn"):
        attentions = model(**inputs, output_attentions=True, use_cache=False).attentions
        return _weights_to_numpy(attentions[layer])
    index = layer + len(layers) if layer < 0 else layer
    if not 0 <= index < len(layers):
        raise ValueError(f"layer: {layer} is out of range for a model with {len(layers)} layers")
    captured: list[Any] = []

    def hook(_module: Any, _args: Any, output: Any) -> None:
        captured.append(output[1] if isinstance(output, tuple) and len(output) > 1 else None)
        raise _StopForward

    handle = layers[index].self_attn.register_forward_hook(hook)
    try:
        model(**inputs, use_cache=False)
    except _StopForward:
        pass
    finally:
        handle.remove()
    return _weights_to_numpy(captured[0] if captured else None)


def _weights_to_numpy(weights: Any) -> np.ndarray:
    if weights is None:  # sdpa / flash kernels never materialise the weights
        raise ValueError("no attention weights; load the model with attn_implementation='eager'")
    out: np.ndarray = weights[0].float().cpu().numpy()  # (H, L, L): batch of one
    return out


# --- the registered reward ---------------------------------------------------------------------


class TagMaxFlowSettings(BaseModel):
    """Model whose attentions are read, the layer, and the eq. (3) parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1, description="Hugging Face model id or local path.")
    layer: int = Field(
        default=-1,
        description="Decoder layer read (negative counts from the end); later layers capture step"
        " importance better (Fig. 4a).",
    )
    tau: float = Field(default=0.05, ge=0.0, description="Edge threshold τ of the flow graph.")
    top_share: float = Field(
        default=0.25, gt=0.0, le=1.0, description="Share of steps in K_top of eq. (3)."
    )
    device: str = Field(default="cpu", description="torch device of the model, e.g. 'cuda:0'.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32", description="torch dtype the model is loaded in."
    )
    max_completion_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Completions of at least this many tokens count as truncated (set it to the "
        "trainer's max completion length); Sample.extra['truncated'] also marks them.",
    )
    truncated_score: float | None = Field(
        default=None,
        description="Score of a truncated completion. None gives NaN: the TRL adapter then leaves "
        "the reward out for that sample (A.7 masking). verl needs a number, e.g. 0.0.",
    )
    max_steps: int = Field(
        default=DEFAULT_MAX_STEPS,
        ge=1,
        description="Completions with more tagged steps are masked like truncated ones "
        "(truncated_score, component truncated = 1) without running the model: ΔF needs up to "
        "one max-flow per step.",
    )


@register_reward
class TagMaxFlowReward(Reward):
    """Q of eq. (3) on the step graph of each completion, read from one layer of a causal LM.

    Pass ``model`` and ``tokenizer`` to reuse loaded ones; otherwise they are loaded from
    ``settings.model`` on the first score, once per reward (eager attention, ``settings.dtype``,
    on ``settings.device``). A completion that is truncated (``Sample.extra['truncated']``, or
    ``max_completion_tokens`` reached) or has more than ``settings.max_steps`` tagged steps is
    masked: it scores ``truncated_score`` (NaN by default) with component ``truncated`` = 1.
    The forward pass costs what the policy's own forward pass on that text costs; set
    ``max_completion_tokens`` to the trainer's limit so longer texts never reach the model.
    """

    name = "tag_maxflow"
    Settings = TagMaxFlowSettings
    components = COMPONENT_KEYS
    masks_truncated = True

    def __init__(
        self, settings: TagMaxFlowSettings, *, model: Any = None, tokenizer: Any = None
    ) -> None:
        super().__init__(settings)
        self._settings = settings
        self._model = model
        self._tokenizer = tokenizer
        self._lock = threading.Lock()

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [[self._score(sample) for sample in group] for group in groups]

    def _score(self, sample: Sample) -> RewardOutput:
        s = self._settings
        parsed = parse_completion(sample.response)
        steps = float(len(parsed.steps))
        if len(parsed.steps) > s.max_steps or self._truncated(sample):
            score = math.nan if s.truncated_score is None else s.truncated_score
            return RewardOutput(score, _components(math.nan, math.nan, steps, math.nan, 1.0))
        nodes = len(node_char_spans(sample.prompt, sample.response, parsed))
        if nodes < 3:  # no intermediate step: Q = 0 whatever the attentions (skip the model)
            return RewardOutput(0.0, _components(0.0, math.nan, steps, math.nan, 0.0))
        model, tokenizer = self._load()
        prompt = model_prompt(sample, tokenizer)
        matrix = step_attention(model, tokenizer, prompt, sample.response, s.layer, parsed)
        result = flow_quality(matrix, s.tau, s.top_share)
        return RewardOutput(
            result.quality,
            _components(result.quality, result.flow, steps, float(result.num_edges), 0.0),
        )

    def _truncated(self, sample: Sample) -> bool:
        if sample.extra.get("truncated"):
            return True
        limit = self._settings.max_completion_tokens
        if limit is None:
            return False
        _, tokenizer = self._load()
        ids = tokenizer(encodable(sample.response), add_special_tokens=False)["input_ids"]
        return len(ids) >= limit

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._model is None or self._tokenizer is None:
                self._model, self._tokenizer = _load_model(self._settings)
            return self._model, self._tokenizer

    def close(self) -> None:
        with self._lock:
            self._model = None
            self._tokenizer = None


def model_prompt(sample: Sample, tokenizer: Any) -> str:
    """The text the policy saw before the completion: a conversational prompt (the TRL adapter's
    ``extra["prompt_messages"]``) through the tokenizer's chat template with the generation
    prompt, as TRL renders it; a plain prompt as it is."""
    messages = sample.extra.get("prompt_messages")
    if messages and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=True
        )
        return str(text)
    return sample.prompt


def _components(
    quality: float, flow: float, steps: float, edges: float, truncated: float
) -> dict[str, float]:
    return dict(zip(COMPONENT_KEYS, (quality, flow, steps, edges, truncated), strict=True))


def _load_model(settings: TagMaxFlowSettings) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(settings.model)
    # Any: transformers types `.to` through a decorator mypy cannot follow
    model: Any = AutoModelForCausalLM.from_pretrained(
        settings.model, dtype=getattr(torch, settings.dtype), attn_implementation="eager"
    )
    return model.to(settings.device).eval(), tokenizer
