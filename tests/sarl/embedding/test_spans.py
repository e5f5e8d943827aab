"""Step character spans agree with the structure reward's segmentation, and tokens map onto them.

The policy embedder (SARL v1 A.1, Implementation A) pools each step's tokens; these tests pin that
the steps it finds are exactly the steps the reward scores, and that each step's tokens decode
back to the step's text (plus, at most, surrounding whitespace: a token such as " 12" or "\\n\\n"
may carry a space or newline next to the step's first or last character).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarl.embedding.spans import step_token_positions, token_char_spans
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.segmentation import extract_steps, step_char_spans
from sarl.tasks.generators import make_problems
from sarl.tasks.traces import structured_trace

CONFIGS = {
    "default": StructureRewardConfig(),
    "no_steps": StructureRewardConfig(missing_think="no_steps"),
    "capped": StructureRewardConfig(max_steps=2),
    "odd_delimiter": StructureRewardConfig(delimiter="aa", think_open="<t>", think_close="</t>"),
}


def spans_texts(response: str, config: StructureRewardConfig) -> tuple[str, ...]:
    return tuple(response[a:b] for a, b in step_char_spans(response, config))


@pytest.mark.parametrize(
    "response",
    [
        "",
        "no think block at all",
        "<think>one</think>answer",
        "<think>\n\n a \n\n\n\n b\n\n</think>\\boxed{1}",
        "prefill <think>a\n\nb",  # unclosed: runs to the end
        "a\n\nb</think>after",  # <think> in the prompt: everything before </think>
        "<think></think>",
        "<think>\n\n\n\n</think>",
        "<think>x\n\n\n\ny\n\nz\n\nw</think>",  # beyond max_steps=2 for 'capped'
        "Xaaa aaa <t>aaaaab aa c</t> aa",  # delimiter overlapping itself
        "<think>\u00e9t\u00e9 \u2211\n\n\U0001f600 ok</think>",
    ],
)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_spans_are_the_reward_s_steps(response: str, name: str) -> None:
    config = CONFIGS[name]
    assert spans_texts(response, config) == extract_steps(response, config).texts


_PIECES = st.sampled_from(
    ["<think>", "</think>", "\n\n", "\n", " ", "\t", "a", "b", "aa", "é", "."]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=24).map("".join), st.sampled_from(list(CONFIGS)))
def test_spans_agree_with_the_segmentation_on_generated_text(response: str, name: str) -> None:
    config = CONFIGS[name]
    assert spans_texts(response, config) == extract_steps(response, config).texts


def _traces(count: int) -> list[str]:
    rng = random.Random(3)
    return [
        structured_trace(p, rng) for p in make_problems("arithmetic", count, seed=5, difficulty=3)
    ]


def _assert_steps_decode_back(tokenizer: Any, ids: list[int], response: str) -> None:
    """Each step's tokens decode to the step's text plus, at most, whitespace at either end, and
    they are consecutive except for special tokens (which no step takes)."""
    config = StructureRewardConfig()
    located = token_char_spans(tokenizer, ids)
    assert located.text == response
    spans = step_char_spans(response, config)
    special = set(tokenizer.all_special_ids)
    for (a, b), positions in zip(spans, step_token_positions(located.spans, spans), strict=True):
        assert positions.size > 0
        run = range(positions[0], positions[-1] + 1)
        assert list(positions) == [p for p in run if ids[p] not in special]
        decoded = tokenizer.decode([ids[p] for p in positions])
        assert decoded.strip() == response[a:b]


def test_canonical_ids_use_offsets_and_steps_decode_back(tiny_lm: tuple[Any, Any]) -> None:
    _, tokenizer = tiny_lm
    for trace in _traces(20):
        ids = [*tokenizer(trace, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        assert token_char_spans(tokenizer, ids).canonical
        _assert_steps_decode_back(tokenizer, ids, trace)


def test_non_canonical_ids_use_prefix_decoding_and_steps_decode_back(
    tiny_lm: tuple[Any, Any],
) -> None:
    """Sampled ids need not be the tokenizer's encoding of their text: spell each step with
    single-byte tokens and interleave special tokens; the exact path must find the same steps."""
    _, tokenizer = tiny_lm
    pad = tokenizer.pad_token_id
    for trace in _traces(5):
        ids: list[int] = []
        for ch in trace:
            piece = tokenizer(ch, add_special_tokens=False)["input_ids"]
            ids.extend([*piece, pad] if ch == "=" else piece)  # a special token mid-step
        ids.append(tokenizer.eos_token_id)
        located = token_char_spans(tokenizer, ids)
        assert not located.canonical
        assert all(
            located.spans[i][0] == located.spans[i][1] for i, t in enumerate(ids) if t == pad
        )
        _assert_steps_decode_back(tokenizer, ids, trace)


def test_multibyte_characters_split_across_byte_tokens(tiny_lm: tuple[Any, Any]) -> None:
    _, tokenizer = tiny_lm
    text = "<think>\u00e9t\u00e9\n\n\U0001f600 ok</think>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    located = token_char_spans(tokenizer, ids)
    spans = step_char_spans(text, StructureRewardConfig())
    positions = step_token_positions(located.spans, spans)
    assert [tokenizer.decode(ids[p[0] : p[-1] + 1]).strip() for p in positions] == [
        "\u00e9t\u00e9",
        "\U0001f600 ok",
    ]
