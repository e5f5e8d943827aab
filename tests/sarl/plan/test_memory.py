"""The per-GPU memory terms, each against a figure worked by hand from its stated source."""

from __future__ import annotations

import pytest

from sarl.plan import memory, storage
from sarl.plan.shapes import KNOWN

QWEN3_4B = KNOWN["qwen/qwen3-4b"]
P = QWEN3_4B.parameters  # 4,022,468,096


def test_sharded_state_is_16_bytes_per_parameter_over_the_gpus() -> None:
    assert memory.sharded_state(P, 8, trained=True) == 16 * P // 8
    assert memory.sharded_state(P, 8, trained=False) == 4 * P // 8


def test_logits_of_todays_preset_pass_exceed_an_h100() -> None:
    # The figure: 32 responses x 9,216 tokens x 151,936 x 2 bytes ~ 90 GB, one copy.
    tokens = 32 * (1024 + 8192)
    one_copy = memory.logits(QWEN3_4B, tokens) // memory.LOGIT_COPIES
    assert one_copy / 1e9 == pytest.approx(89.6, abs=0.1)


def test_activation_terms_by_hand() -> None:
    h, layers, intermediate = 2560, 36, 9728
    q, kv = 32 * 128, 8 * 128
    per_token = 2 * (h + q + 2 * kv + 2 * q) + 2 * (h + 4 * intermediate) + 4 * h
    assert memory.layer_activation_bytes_per_token(QWEN3_4B) == per_token
    tokens = 1000
    assert memory.activations(QWEN3_4B, tokens) == 2 * h * tokens * layers + per_token * tokens
    assert memory.activations(QWEN3_4B, tokens, checkpointing=False) == per_token * tokens * layers


def test_kv_cache_is_what_is_left_of_vllms_share() -> None:
    share = memory.vllm_share(80 * memory.GIB, 0.5)
    assert share == 40 * memory.GIB
    left = share - 2 * P - memory.vllm_activations(QWEN3_4B) - memory.VLLM_SLEEP_RESIDUAL
    assert memory.kv_cache_tokens(QWEN3_4B, share) == left // 147_456
    assert memory.kv_cache_tokens(QWEN3_4B, 4 * memory.GIB) == 0  # weights alone do not fit


def test_checkpoint_sizes() -> None:
    # The preset's own note: ~60 GB per actor checkpoint, ~48 GB per critic checkpoint.
    assert storage.actor_checkpoint(P) / 1e9 == pytest.approx(56.3, abs=0.1)
    assert storage.critic_checkpoint(P) / 1e9 == pytest.approx(48.3, abs=0.1)
    assert storage.store_need(storage.run_checkpoint(P, critic=False), keep_last=3) == 4 * 14 * P


def test_scratch_on_several_nodes_holds_the_nodes_shards_only() -> None:
    one = storage.scratch_need(P, critic=False, keep_last=3, nodes=1)
    two = storage.scratch_need(P, critic=False, keep_last=3, nodes=2)
    assert one - two == 3 * (12 * P - 12 * P // 2)
