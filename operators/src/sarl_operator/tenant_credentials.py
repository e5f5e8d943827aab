"""Tenant policy, credentials: which Secrets and environment variables a tenant's spec may name.

A check of :data:`sarl_operator.tenant_policy.CHECKS` (called by the admission webhook and the
handlers through :func:`sarl_operator.tenant_policy.violations`). A spec never holds a credential
(``sarl.spec.secrets``), but it names where one is, and the operator then hands that credential to
pods the spec shapes:

* a **Secret** (``spec.storage.credentials_secret``, ``spec.resources.hf_token``, image pull
  Secrets, and the same fields of ``spec.serving.<model>``) is mounted into the tenant's pods, so
  a spec naming another Secret of the namespace (the platform's root store key an administrator
  copied there, a deploy key) would read it through a judge URL or a log line. Allowed:
  :data:`~sarl.cluster.tenancy.TENANT_SECRET` and the policy's ``secrets``;
* an **environment variable** named as a credential (``api_key_env`` of a chat judge,
  ``sarl.rewards.rlkd.chat``; any reward-settings key ending in ``_env``) is sent as a bearer
  token to a URL the spec chooses, so ``api_key_env: AWS_SECRET_ACCESS_KEY`` would post the
  tenant pod's store key anywhere. Allowed: the policy's ``envNames``, never one starting with
  :data:`~sarl.cluster.tenancy.RESERVED_ENV_PREFIXES`.

Rewards' settings are free-form mappings in the spec (``spec.reward[i].settings``, validated by
the reward's own model only where the reward is registered), so they are walked as data. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from sarl.cluster.tenancy import RESERVED_ENV_PREFIXES, TENANT_SECRET, TenantPolicy
from sarl.spec.cluster_fields import SecretKeyRef, ServedModelSpec
from sarl.spec.experiment import Experiment
from sarl_operator.platform_settings import Platform

#: Keys of reward settings that name a Secret (a reference ``{secret_name, key}``, or a name).
SECRET_NAME_KEYS: Final = frozenset({"secret_name", "credentials_secret", "existing_secret"})
#: Suffix of reward-settings keys naming an environment variable (``api_key_env``).
ENV_SUFFIX: Final = "_env"


def _served_secrets(where: str, served: ServedModelSpec) -> Iterator[tuple[str, str]]:
    yield from _ref(f"{where}.hf_token", served.hf_token)
    for i, name in enumerate(served.image_pull_secrets):
        yield f"{where}.image_pull_secrets[{i}]", name


def _ref(where: str, ref: SecretKeyRef | None) -> Iterator[tuple[str, str]]:
    if ref is not None:
        yield f"{where}.secret_name", ref.secret_name


def _walk(where: str, node: Any) -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every key of the nested mappings and lists under ``node``."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            path = f"{where}.{key}"
            yield path, str(key), value
            yield from _walk(path, value)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(f"{where}[{i}]", value)


def _reward_settings(exp: Experiment) -> Iterator[tuple[str, str, Any]]:
    for i, term in enumerate(exp.spec.reward):
        yield from _walk(f"spec.reward[{i}].settings", term.settings)


def secret_fields(exp: Experiment) -> list[tuple[str, str]]:
    """(field path, Secret name) of every Secret the spec makes the operator hand to a pod."""
    spec = exp.spec
    found: list[tuple[str, str]] = []
    if spec.storage.credentials_secret:
        found.append(("spec.storage.credentials_secret", spec.storage.credentials_secret))
    found += _ref("spec.resources.hf_token", spec.resources.hf_token)
    found += [
        (f"spec.resources.image_pull_secrets[{i}]", name)
        for i, name in enumerate(spec.resources.image_pull_secrets)
    ]
    found += _served_secrets("spec.serving.embedding", spec.serving.embedding)
    found += _served_secrets("spec.serving.judge", spec.serving.judge)
    for path, key, value in _reward_settings(exp):
        if key in SECRET_NAME_KEYS and isinstance(value, str):
            found.append((path, value))
    return found


def env_name_fields(exp: Experiment) -> list[tuple[str, str]]:
    """(field path, variable name) of every environment variable the spec names as a
    credential: reward-settings keys ending in :data:`ENV_SUFFIX` with a string value."""
    return [
        (path, value)
        for path, key, value in _reward_settings(exp)
        if key.lower().endswith(ENV_SUFFIX) and isinstance(value, str) and value
    ]


def secret_violations(exp: Experiment, policy: TenantPolicy, _: Platform) -> list[str]:
    """One message per Secret outside :data:`TENANT_SECRET` and the policy's ``secrets``."""
    allowed = (TENANT_SECRET, *policy.secrets)
    listed = ", ".join(allowed)
    return [
        f"{field}={name!r}: namespace {policy.namespace} may not use this Secret (allowed: "
        f"{listed}); use {TENANT_SECRET}, or ask the platform's administrators to add it to "
        f"tenants[].secrets of {policy.namespace}"
        for field, name in secret_fields(exp)
        if name not in allowed
    ]


def env_name_violations(exp: Experiment, policy: TenantPolicy, _: Platform) -> list[str]:
    """One message per credential variable that is reserved or not in ``envNames``."""
    out: list[str] = []
    for field, name in env_name_fields(exp):
        if name.upper().startswith(RESERVED_ENV_PREFIXES):
            reserved = ", ".join(RESERVED_ENV_PREFIXES)
            out.append(
                f"{field}={name!r}: variables starting with {reserved} hold the platform's "
                "credentials and are never sent by a spec; put your token in a variable of "
                f"tenants[].envNames of {policy.namespace}"
            )
        elif name not in policy.env_names:
            listed = ", ".join(policy.env_names) or "none"
            out.append(
                f"{field}={name!r}: namespace {policy.namespace} may not send this variable "
                f"(allowed: {listed}); ask the platform's administrators to add it to "
                f"tenants[].envNames of {policy.namespace}"
            )
    return out


def check(exp: Experiment, policy: TenantPolicy, platform: Platform) -> list[str]:
    """The credentials area of the tenant policy: Secrets, then environment variables."""
    return secret_violations(exp, policy, platform) + env_name_violations(exp, policy, platform)
