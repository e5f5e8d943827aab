"""MAX-Flow math (§3.2, eqs. 2–3) on hand-made attention: step matrix, flow, ΔF_k and Q."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarl.rewards.tagged import maxflow as maxflow_module
from sarl.rewards.tagged.maxflow import (
    DEFAULT_MAX_STEPS,
    balance_quality,
    flow_graph,
    flow_quality,
    node_char_spans,
    node_importance,
    step_matrix,
    token_spans,
)
from sarl.rewards.tagged.tags import parse_completion

# (H=2, L=4, L=4) causal attention; steps are tokens {0}, {1, 2}, {3}.
ATTENTION = np.array(
    [
        [[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]],
        [[1, 0, 0, 0], [0.9, 0.1, 0, 0], [0.4, 0.4, 0.2, 0], [0.5, 0.1, 0.1, 0.3]],
    ]
)
SPANS = [(0, 1), (1, 3), (3, 4)]


def test_step_matrix_by_hand() -> None:
    # A_10 = (0.5 + 0.2 + 0.9 + 0.4) / (2 heads * 2 tokens); A_11: maxima 0.5, 0.5, 0.1, 0.4
    # A_20 = (0.1 + 0.5) / 2; A_21: max(0.2, 0.3) and max(0.1, 0.1); A_22 = (0.4 + 0.3) / 2
    expected = np.array([[1.0, 0, 0], [0.5, 0.375, 0], [0.3, 0.2, 0.35]])
    np.testing.assert_allclose(step_matrix(ATTENTION, SPANS), expected)


def test_step_matrix_empty_span_and_bad_shape() -> None:
    out = step_matrix(ATTENTION, [(0, 1), (2, 2), (1, 4)])
    assert out.shape == (3, 3)
    assert not out[1].any() and not out[:, 1].any()
    with pytest.raises(ValueError, match="heads, L, L"):
        step_matrix(ATTENTION[0], SPANS)


def test_token_spans_from_offsets() -> None:
    # tokens: special (0,0), "ab" (0,2), "c" (2,3), " d" (3,5), "e" (6,7)
    offsets = [(0, 0), (0, 2), (2, 3), (3, 5), (6, 7)]
    spans = token_spans(offsets, [(0, 3), (3, 6), (6, 7), (7, 9)])
    assert spans == [(1, 3), (3, 4), (4, 5), (0, 0)]


def test_node_char_spans() -> None:
    prompt, completion = "Q? ", "<verify>a</verify> <summarize>b</think> 42"
    spans = node_char_spans(prompt, completion, parse_completion(completion))
    text = prompt + completion
    assert [text[a:b] for a, b in spans] == ["Q? ", "<verify>a</verify> ", "<summarize>b", " 42"]
    no_answer = "<verify>a</think>  "
    assert len(node_char_spans(prompt, no_answer, parse_completion(no_answer))) == 2


def test_edges_point_from_read_step_to_reader() -> None:
    a = np.array([[0.9, 0.0, 0.0], [0.5, 0.9, 0.0], [0.04, 0.3, 0.0]])
    cap = flow_graph(a, tau=0.05)
    # A_10 = 0.5: step 1 reads the question -> edge 0 -> 1; A_20 = 0.04 <= tau: no edge
    assert cap[0, 1] == 0.5 and cap[1, 2] == 0.3 and cap[0, 2] == 0.0
    assert not np.diag(cap).any()


def _causal(n: int, entries: dict[tuple[int, int], float]) -> np.ndarray:
    a = np.zeros((n, n))
    for (i, j), value in entries.items():
        a[i, j] = value
    return a


@pytest.mark.parametrize(
    ("entries", "n", "flow", "importance", "quality"),
    [
        # chain q -> 1 -> a: bottleneck 0.4, the one step carries it all: Q = 1 - 0.4/0.4
        ({(1, 0): 0.5, (2, 1): 0.4}, 3, 0.4, (0.4,), 0.0),
        # below the threshold there is no edge and no flow
        ({(1, 0): 0.5, (2, 1): 0.04}, 3, 0.0, (0.0,), 0.0),
        # direct edge only: flow but no step matters -> Q = 0 by convention
        ({(2, 0): 0.5}, 3, 0.5, (0.0,), 0.0),
        # direct 0.2 + via 1 (0.3) + via 2 (0.3); each step removal loses 0.3: Q = 1 - 0.3/0.6
        (
            {(1, 0): 0.5, (2, 0): 0.3, (2, 1): 0.4, (3, 0): 0.2, (3, 1): 0.3, (3, 2): 0.3},
            4,
            0.8,
            (0.3, 0.3),
            0.5,
        ),
        # four parallel paths of 0.4, 0.3, 0.2, 0.1 plus a direct 0.2: top-25% is one step
        (
            {(1, 0): 1.0, (2, 0): 1.0, (3, 0): 1.0, (4, 0): 1.0, (5, 0): 0.2}
            | {(5, 1): 0.4, (5, 2): 0.3, (5, 3): 0.2, (5, 4): 0.1},
            6,
            1.2,
            (0.4, 0.3, 0.2, 0.1),
            0.6,
        ),
        # a serial chain: every step is a bottleneck of 0.3
        ({(1, 0): 0.5, (2, 1): 0.4, (3, 2): 0.3}, 4, 0.3, (0.3, 0.3), 0.5),
    ],
)
def test_flow_and_importance_by_hand(
    entries: dict[tuple[int, int], float],
    n: int,
    flow: float,
    importance: tuple[float, ...],
    quality: float,
) -> None:
    result = flow_quality(_causal(n, entries), tau=0.05)
    assert result.flow == pytest.approx(flow, abs=1e-6)
    assert result.importance == pytest.approx(importance, abs=1e-6)
    assert result.quality == pytest.approx(quality, abs=1e-6)
    assert result.num_edges == sum(v > 0.05 for v in entries.values())


def test_attention_to_later_steps_carries_no_flow() -> None:
    # only the upper triangle (impossible with causal attention): no path from question to answer
    upper = np.triu(np.full((4, 4), 0.5), k=1)
    assert flow_quality(upper).flow == 0.0


@pytest.mark.parametrize("n", [0, 1, 2])
def test_too_few_nodes(n: int) -> None:
    result = flow_quality(np.full((n, n), 0.5))
    assert result.importance == () and result.quality == 0.0


def test_flow_quality_rejects_non_square() -> None:
    with pytest.raises(ValueError, match="square"):
        flow_quality(np.zeros((2, 3)))


def test_large_capacities_are_rescaled_not_wrapped() -> None:
    # scipy wraps capacities beyond int32; the scale is lowered instead
    cap = np.array([[0, 5000.0, 3000.0], [0, 0, 4000.0], [0, 0, 0]])
    flow, deltas = node_importance(cap)
    assert flow == pytest.approx(7000.0, rel=1e-6)
    assert deltas == pytest.approx([4000.0], rel=1e-6)


@pytest.mark.parametrize(
    ("importance", "top_share", "quality"),
    [
        ([4, 3, 2, 1], 0.25, 1 - 4 / 10),
        ([1, 2, 3, 4], 0.25, 1 - 4 / 10),  # order does not matter
        ([1] * 8, 0.25, 1 - 2 / 8),  # top 25% of 8 is 2 steps
        ([5, 4, 3, 2, 1], 0.25, 1 - 9 / 15),  # ceil(1.25) = 2
        ([4, 3, 2, 1], 0.5, 1 - 7 / 10),
        ([0.3, 0.3, 0.3], 0.3, 1 - 0.3 / 0.9),  # ceil(0.9) = 1
        ([5], 0.25, 0.0),  # a single step holds all importance
        ([], 0.25, 0.0),
        ([0, 0], 0.25, 0.0),
    ],
)
def test_balance_quality_eq_3(importance: list[float], top_share: float, quality: float) -> None:
    assert balance_quality(importance, top_share) == pytest.approx(quality)


def test_reward_core_does_not_import_torch() -> None:
    code = (
        "import sys; from sarl.rewards.registry import create_reward; "
        "create_reward('tag_maxflow', {'model': 'm'}); create_reward('tag_lcs'); "
        "create_reward('tag_format'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- bounded work (issue 12) ---


def _reference_importance(capacity: np.ndarray, scale: float = 1e6) -> tuple[float, list[float]]:
    """ΔF as first written: one dense max-flow per intermediate node."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import maximum_flow

    n = capacity.shape[0]
    total = float(capacity.sum())
    scale = min(scale, 0.5 * (2**31 - 1) / total) if total > 0 else scale
    units = np.rint(capacity * scale).astype(np.int32)

    def flow(u: np.ndarray) -> int:
        return int(maximum_flow(csr_array(u), 0, n - 1).flow_value)

    full = flow(units)
    deltas = []
    for k in range(1, n - 1):
        cut = units.copy()
        cut[k, :] = 0
        cut[:, k] = 0
        deltas.append((full - flow(cut)) / scale)
    return full / scale, deltas


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 24), st.sampled_from([0.0, 0.05, 0.2]), st.integers(0, 2**32 - 1))
def test_importance_skipping_idle_nodes_equals_one_max_flow_per_node(
    n: int, tau: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    a = np.tril(rng.random((n, n)) ** 4, -1)  # (n, n) causal
    a /= np.maximum(a.sum(axis=1, keepdims=True), 1e-9)
    cap = flow_graph(a, tau)
    assert node_importance(cap) == _reference_importance(cap)


def test_only_nodes_carrying_flow_cost_a_max_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = maxflow_module._max_flow

    def counting(graph: object, source: int, sink: int) -> object:
        calls.append(1)
        return real(graph, source, sink)

    monkeypatch.setattr(maxflow_module, "_max_flow", counting)
    n = 400
    a = np.zeros((n, n))
    a[1 : n - 1, 0] = 0.5  # every step reads the question ...
    a[n - 1, 1:4] = 0.2  # ... but the answer reads only steps 1-3
    flow, deltas = node_importance(flow_graph(a, 0.05))
    assert len(deltas) == n - 2 and flow == pytest.approx(0.6)
    assert len(calls) == 1 + 3  # the full graph, then steps 1, 2 and 3 (the 395 others idle)
    assert deltas[:3] == pytest.approx([0.2, 0.2, 0.2]) and not any(deltas[3:])


def test_completions_past_max_steps_are_masked_without_the_model() -> None:
    from sarl.rewards.base import Sample
    from sarl.rewards.registry import create_reward

    body = "".join(f"<verify> {k} " for k in range(DEFAULT_MAX_STEPS + 1))
    reward = create_reward("tag_maxflow", {"model": "/nonexistent/never-loaded"})
    [[out]] = reward.score_groups([[Sample(f"<think>{body}</think> 5", prompt="Q")]])
    assert np.isnan(out.score) and out.components["truncated"] == 1.0
    assert out.components["num_steps"] == DEFAULT_MAX_STEPS + 1
    capped = create_reward("tag_maxflow", {"model": "/x", "max_steps": 2, "truncated_score": 0.0})
    [[zero]] = capped.score_groups([[Sample("<think><verify>a<verify>b<verify>c</think>5")]])
    assert zero.score == 0.0 and zero.components["truncated"] == 1.0
