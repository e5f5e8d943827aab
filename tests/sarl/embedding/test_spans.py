"""Step character spans agree with the structure reward's segmentation, and tokens map onto them.

The policy embedder (SARL v1 A.1, Implementation A) pools each step's tokens; these tests pin that
the steps it finds are exactly the steps the reward scores, and that each step's tokens decode
back to the step's text (plus, at most, surrounding whitespace: a token such as " 12" or "\\n\\n"
may carry a space or newline next to the step's first or last character).
"""

from __future__ import annotations

import functools
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


def _byte_level() -> Any:
    """Byte-level BPE (GPT-2, Qwen): a character outside the merges is one token per byte."""
    from sarl.runner.tiny import train_tokenizer

    return train_tokenizer(["<think>step one\n\nstep two</think>", "abc def"] * 5, vocab_size=300)


def _byte_fallback() -> Any:
    """SentencePiece-style byte fallback (Llama, Mistral): a character not in the vocabulary is
    spelled with ``<0xNN>`` tokens, and a run of them that is not valid UTF-8 decodes to one
    U+FFFD per byte."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    vocab |= {"<unk>": 256, "a": 257, "b": 258, "ab": 259}
    model = models.BPE(vocab=vocab, merges=[("a", "b")], byte_fallback=True, unk_token="<unk>")
    tokenizer = Tokenizer(model)
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<unk>"
    )


@functools.cache
def _byte_tokenizers() -> tuple[Any, Any]:
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    return _byte_level(), _byte_fallback()


@pytest.fixture(params=[0, 1], ids=["byte_level", "byte_fallback"])
def byte_tokenizer(request: pytest.FixtureRequest) -> Any:
    return _byte_tokenizers()[request.param]


def _spelled(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Each character encoded alone (not the tokenizer's encoding of the text: merges across
    characters are missing), and the span every one of those tokens carries: its character."""
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for k, char in enumerate(text):
        piece = tokenizer(char, add_special_tokens=False)["input_ids"]
        ids += piece
        spans += [(k, k + 1)] * len(piece)
    return ids, spans


MULTIBYTE = "<think>ab step \u2211 one\n\n\U0001f600 \u00e9t\u00e9 ab\n\nx\ufffdy</think>"


def test_every_byte_token_of_a_character_gets_its_span_on_both_paths(
    byte_tokenizer: Any,
) -> None:
    """Both paths give each byte token of a multi-byte character that character's span, so a
    step pools all of them (the exact path used to give it to the first byte token alone)."""
    for char in "\u2211\U0001f600\ufffd":
        assert len(byte_tokenizer(char, add_special_tokens=False)["input_ids"]) == len(
            char.encode()
        )
    ids, expected = _spelled(byte_tokenizer, MULTIBYTE)
    located = token_char_spans(byte_tokenizer, ids)
    assert not located.canonical
    assert located.spans == tuple(expected)
    _assert_steps_decode_back(byte_tokenizer, ids, MULTIBYTE)
    canonical = byte_tokenizer(MULTIBYTE, add_special_tokens=False)["input_ids"]
    assert token_char_spans(byte_tokenizer, canonical).canonical
    _assert_steps_decode_back(byte_tokenizer, canonical, MULTIBYTE)


_MIXED = st.sampled_from(["a", "b", "ab", " ", "\n\n", "\u00e9", "\u2211", "\U0001f600", "\ufffd"])


@settings(max_examples=60, deadline=None)
@given(st.lists(_MIXED, max_size=12).map("".join))
def test_byte_tokens_get_their_character_on_generated_text(text: str) -> None:
    """Byte fallback decodes a U+FFFD of the text and the cut bytes of a character alike, so
    there two U+FFFDs in a row are not generated (their byte tokens may swap characters)."""
    for tokenizer in _byte_tokenizers():
        if tokenizer is _byte_tokenizers()[1] and "\ufffd\ufffd" in text:
            continue
        ids, expected = _spelled(tokenizer, text)
        assert token_char_spans(tokenizer, ids).spans == tuple(expected)
