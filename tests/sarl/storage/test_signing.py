"""Manifest signatures (:mod:`sarl.storage.signing`): HMAC-SHA256 over canonical JSON with the
namespace's key; any change, another key or no signature is named, and the key never shows."""

from __future__ import annotations

import pytest

from sarl.cluster.tenancy import TenantKeys
from sarl.storage.signing import (
    KEY_ENV,
    CheckpointKey,
    Signature,
    canonical,
    problem,
    sign,
)

KEY_A = CheckpointKey(b"team-a-key-0123456789abcdef")
KEY_B = CheckpointKey(b"team-b-key-0123456789abcdef")
DOC = {
    "format": "sarl-checkpoint",
    "version": 1,
    "step": 4,
    "created_at": "2026-01-01T00:00:00+00:00",
    "files": [{"path": "model.safetensors", "size": 3, "sha256": "a" * 64}],
    "metadata": {"mlflow_run_id": "r1"},
}


def test_the_env_variable_is_the_tenant_secrets_key() -> None:
    assert KEY_ENV == TenantKeys.CHECKPOINT_KEY == "SARL_CHECKPOINT_KEY"


def test_a_signed_manifest_verifies_whatever_the_key_order() -> None:
    signature = sign(DOC, KEY_A)
    reordered = dict(reversed(list(DOC.items())))
    assert canonical(reordered) == canonical(DOC)
    assert problem(reordered, signature, KEY_A) is None
    assert canonical({**DOC, "signature": signature.to_json()}) == canonical(DOC)


@pytest.mark.parametrize(
    "change",
    [
        {"step": 5},
        {"files": [{"path": "model.safetensors", "size": 3, "sha256": "b" * 64}]},
        {"files": [{"path": "model.pt", "size": 3, "sha256": "a" * 64}]},
        {"files": [{"path": "model.safetensors", "size": 4, "sha256": "a" * 64}]},
        {"metadata": {"mlflow_run_id": "team-b-run"}},
    ],
)
def test_any_change_after_signing_is_named(change: dict[str, object]) -> None:
    signature = sign(DOC, KEY_A)
    assert problem({**DOC, **change}, signature, KEY_A) == (
        "its signature does not match its contents (the manifest was changed after signing)"
    )


def test_another_key_and_no_signature_are_named() -> None:
    why = problem(DOC, sign(DOC, KEY_B), KEY_A)
    assert why is not None and "signed with another key" in why
    assert KEY_B.key_id in why and KEY_A.key_id in why
    assert problem(DOC, None, KEY_A) == "it has no signature"


def test_a_forged_key_id_does_not_help() -> None:
    forged = Signature(key_id=KEY_A.key_id, value=sign(DOC, KEY_B).value)
    assert "does not match" in str(problem(DOC, forged, KEY_A))


def test_an_unknown_scheme_is_named() -> None:
    other = Signature(key_id=KEY_A.key_id, value=sign(DOC, KEY_A).value, version=2)
    assert "version 2" in str(problem(DOC, other, KEY_A))


def test_the_signature_round_trips_and_malformed_ones_are_refused() -> None:
    signature = sign(DOC, KEY_A)
    assert Signature.from_json(signature.to_json()) == signature
    for raw in ("x", {"scheme": "hmac-sha256", "version": 1, "key_id": "zz", "value": "0" * 64}):
        with pytest.raises(ValueError, match="signature"):
            Signature.from_json(raw)


def test_the_key_comes_from_the_environment_and_never_shows() -> None:
    secret = "s3cr3t-value-0123456789"
    key = CheckpointKey.from_env({KEY_ENV: f" {secret}\n"})
    assert key == CheckpointKey(secret.encode())
    assert secret not in repr(key) and secret not in key.key_id
    assert CheckpointKey.from_env({}) is None
    assert CheckpointKey.from_env({KEY_ENV: ""}) is None


def test_a_short_key_is_refused_naming_the_variable_not_the_value() -> None:
    with pytest.raises(ValueError, match="SARL_CHECKPOINT_KEY: .* 5 characters") as refused:
        CheckpointKey.from_env({KEY_ENV: "short"})
    assert "short" not in str(refused.value).replace("shorter", "")
