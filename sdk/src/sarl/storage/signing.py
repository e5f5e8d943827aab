"""Signatures of checkpoint manifests: HMAC-SHA256 with a tenant's checkpoint key.

A checkpoint's manifest lists its files with their sizes and sha256; whoever can write the store
can write a manifest too, so on a shared cluster the hashes alone prove nothing (issue 36: a
checkpoint planted in another team's prefix runs code in that team's trainer at its next
restart). A manifest written by a job that holds its namespace's key
(:data:`~sarl.cluster.tenancy.TenantKeys.CHECKPOINT_KEY`, given to a tenant's pods by the
operator from the Secret ``sarl-tenant``) carries a :class:`Signature` over its canonical JSON
(:func:`canonical`: step, creation time, every file's path, size and sha256, and the metadata);
before a checkpoint is resumed or downloaded, :mod:`sarl.storage.base` asks :func:`problem`
whether it verifies, and refuses it when not — before any file is fetched.

Key unset (a local run, a single-team install): nothing is signed or verified, as before. Key
set: an unsigned manifest, one signed with another key, or one changed after signing is refused.

Format (``"signature"`` in the manifest, beside the fields it covers)::

    {"scheme": "hmac-sha256", "version": 1, "key_id": "<16 hex>", "value": "<64 hex>"}

``key_id`` is derived from the key (an HMAC of a fixed label, so it reveals nothing usable) and
tells "signed with another key" apart from "changed after signing", and lets a later version
accept a rotated key by id; ``version`` lets the scheme evolve. Pure: no I/O; called by
:mod:`sarl.storage.base` (sign on save, verify on ``latest``/``download``) and
:func:`sarl.storage.open_store` (the key from the environment).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sarl.cluster.tenancy import TenantKeys

#: The environment variable holding the namespace's checkpoint key.
KEY_ENV: Final = TenantKeys.CHECKPOINT_KEY
SCHEME: Final = "hmac-sha256"
SCHEME_VERSION: Final = 1
#: Shorter keys are refused: the operator's keys are random, a short one is a mistake.
MIN_KEY_CHARS: Final = 16
# Domain separation: the same key never signs anything else with the same bytes.
_KEY_ID_LABEL: Final = b"sarl-checkpoint-key-id"
_SIGNED_LABEL: Final = b"sarl-checkpoint-manifest-v1\n"
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class CheckpointKey:
    """A namespace's checkpoint-signing key; its repr never shows the secret."""

    secret: bytes = field(repr=False)

    @property
    def key_id(self) -> str:
        """16 hex characters naming the key (not the secret: an HMAC of a fixed label)."""
        return hmac.new(self.secret, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> CheckpointKey | None:
        """The key in :data:`KEY_ENV`; None when unset or empty. ValueError naming the variable
        (never its value) when it is shorter than :data:`MIN_KEY_CHARS`."""
        raw = environ.get(KEY_ENV, "").strip()
        if not raw:
            return None
        if len(raw) < MIN_KEY_CHARS:
            raise ValueError(
                f"{KEY_ENV}: the checkpoint-signing key has {len(raw)} characters, at least "
                f"{MIN_KEY_CHARS} are needed; use a random key (e.g. `openssl rand -hex 32`) "
                "or unset it to keep checkpoints unsigned"
            )
        return cls(raw.encode())


@dataclass(frozen=True)
class Signature:
    """The ``signature`` object of a manifest (format in the module docstring)."""

    key_id: str
    value: str
    scheme: str = SCHEME
    version: int = SCHEME_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "version": self.version,
            "key_id": self.key_id,
            "value": self.value,
        }

    @classmethod
    def from_json(cls, raw: object) -> Signature:
        """Parse a manifest's ``signature``; ValueError when it is not one. An unknown scheme or
        version parses (so :func:`problem` can name it); malformed hex does not."""
        if not isinstance(raw, dict):
            raise ValueError("signature is not an object")
        scheme, version = raw.get("scheme"), raw.get("version")
        key_id, value = raw.get("key_id"), raw.get("value")
        if not (isinstance(scheme, str) and isinstance(version, int)):
            raise ValueError("signature has no scheme or version")
        if not (isinstance(key_id, str) and _HEX16.match(key_id)):
            raise ValueError("signature key_id is not 16 hex characters")
        if not (isinstance(value, str) and _HEX64.match(value)):
            raise ValueError("signature value is not 64 hex characters")
        return cls(key_id=key_id, value=value, scheme=scheme, version=version)


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: ``doc`` (the manifest without ``signature``) as JSON with
    sorted keys, no whitespace and ASCII only, so any writer produces the same bytes."""
    body = {k: v for k, v in doc.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _mac(doc: Mapping[str, Any], key: CheckpointKey) -> str:
    return hmac.new(key.secret, _SIGNED_LABEL + canonical(doc), hashlib.sha256).hexdigest()


def sign(doc: Mapping[str, Any], key: CheckpointKey) -> Signature:
    """The signature of the manifest ``doc`` with ``key``."""
    return Signature(key_id=key.key_id, value=_mac(doc, key))


def problem(doc: Mapping[str, Any], signature: Signature | None, key: CheckpointKey) -> str | None:
    """Why the manifest ``doc`` does not verify with ``key`` (a phrase for the refusal
    message), or None when it does. Compares in constant time."""
    if signature is None:
        return "it has no signature"
    if (signature.scheme, signature.version) != (SCHEME, SCHEME_VERSION):
        return (
            f"its signature scheme {signature.scheme!r} version {signature.version} is not "
            f"{SCHEME!r} version {SCHEME_VERSION}"
        )
    if not hmac.compare_digest(signature.key_id, key.key_id):
        return (
            f"it is signed with another key (key id {signature.key_id}; this namespace's key "
            f"has id {key.key_id})"
        )
    if not hmac.compare_digest(signature.value, _mac(doc, key)):
        return "its signature does not match its contents (the manifest was changed after signing)"
    return None
