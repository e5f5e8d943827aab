"""``EmbedderConfig`` / ``make_embedder`` for the causal-LM kinds: fields, defaults, and no torch
at import or build time (the reward core must stay torch-free)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from sarl.embedding import hf_causal, policy
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.rewards.registry import RewardConfigError, create_reward


def test_policy_kind_builds_an_unbound_policy_embedder_with_its_settings() -> None:
    built = make_embedder(EmbedderConfig(kind="policy", layer=-1, batch_size=2, max_tokens=64))
    assert isinstance(built, policy.PolicyEmbedder) and not built.bound
    assert (built.layer, built.batch_size, built.max_tokens) == (-1, 2, 64)
    default = make_embedder(EmbedderConfig(kind="policy"))
    assert isinstance(default, policy.PolicyEmbedder)
    assert (default.layer, default.batch_size, default.max_tokens) == ("middle", 8, None)


def test_hf_causal_defaults(tmp_path: Path) -> None:
    built = make_embedder(EmbedderConfig(kind="hf_causal", model=str(tmp_path)))
    assert isinstance(built, hf_causal.HFCausalEmbedder)
    assert (built.layer, built.batch_size, built.max_tokens, built.device) == (
        "middle",
        hf_causal.DEFAULT_BATCH_SIZE,
        hf_causal.DEFAULT_MAX_TOKENS,
        "cpu",
    )


@pytest.mark.parametrize("layer", ["top", 1.5, None])
def test_layer_is_an_int_or_middle(layer: object) -> None:
    with pytest.raises(ValidationError, match="layer"):
        EmbedderConfig(kind="policy", layer=layer)


def test_structure_reward_settings_accept_the_new_kinds() -> None:
    reward = create_reward("structure", {"embedder": {"kind": "policy", "layer": 2}, "workers": 1})
    assert isinstance(reward.scorer.embedder, policy.PolicyEmbedder)  # type: ignore[attr-defined]
    with pytest.raises(RewardConfigError, match="embedder"):
        create_reward("structure", {"embedder": {"kind": "policy", "layers": 2}})


def test_building_and_importing_the_new_kinds_imports_no_torch() -> None:
    code = (
        "import sys; from sarl.rewards.registry import create_reward; "
        "import sarl.integrations.trl, sarl.embedding.hf_causal; "
        "create_reward('structure', {'embedder': {'kind': 'policy'}, 'workers': 1}); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
