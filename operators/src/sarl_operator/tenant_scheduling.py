"""Tenant policy, scheduling: the priority class, tolerations and node selectors a tenant's spec
may give its pods.

A check of :data:`sarl_operator.tenant_policy.CHECKS` (called by the admission webhook and the
handlers through :func:`sarl_operator.tenant_policy.violations`). The trainer, evaluation and
served-model pods carry ``spec.resources.priority_class`` / ``tolerations`` / ``node_selector``
(served models their own ``spec.serving.<model>.tolerations`` / ``node_selector``, else the
resources'), so a spec could otherwise preempt the cluster's own components or other teams
(``system-cluster-critical``) and land on nodes reserved for others (a toleration of their taint,
a selector of their pool). Allowed: a priority class of the policy's ``priorityClasses``, never one
starting with ``system-`` (Kubernetes reserves that prefix for its built-in critical classes:
``SystemPriorityClassPrefix`` in kubernetes pkg/apis/scheduling/types.go, v1.31.0); a toleration
equal to one of the policy's ``tolerations`` (fields ``key``, ``operator``, ``value``,
``effect``; anything else, ``tolerationSeconds`` included, is not in a policy entry and so is
refused); a node-selector key of the policy's ``nodeSelectors`` with one of its values. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from sarl.cluster.tenancy import TenantPolicy, Toleration
from sarl.spec.experiment import Experiment
from sarl_operator.platform_settings import Platform

#: Prefix of the PriorityClasses Kubernetes reserves for itself (never a tenant's).
SYSTEM_PRIORITY_PREFIX: Final = "system-"


def _placements(exp: Experiment) -> list[tuple[str, list[dict[str, Any]], dict[str, str]]]:
    """(field prefix, tolerations, node selector) of the trainer's pods and each served model."""
    res, serving = exp.spec.resources, exp.spec.serving
    return [
        ("spec.resources", res.tolerations, res.node_selector),
        ("spec.serving.embedding", serving.embedding.tolerations, serving.embedding.node_selector),
        ("spec.serving.judge", serving.judge.tolerations, serving.judge.node_selector),
    ]


def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def priority_violations(exp: Experiment, policy: TenantPolicy) -> list[str]:
    name = exp.spec.resources.priority_class
    if name is None:
        return []
    field = f"spec.resources.priority_class={name!r}"
    if name.startswith(SYSTEM_PRIORITY_PREFIX):
        return [
            f"{field}: the system- priority classes belong to the cluster's own components "
            "and are never given to a tenant's pods"
        ]
    if name in policy.priority_classes:
        return []
    listed = ", ".join(policy.priority_classes) or "none"
    return [
        f"{field}: namespace {policy.namespace} may not use this priority class (allowed: "
        f"{listed}); ask the platform's administrators to add it to tenants[].priorityClasses"
    ]


def _as_toleration(value: Mapping[str, Any]) -> Toleration | None:
    try:
        return Toleration.model_validate(dict(value))
    except ValidationError:
        return None


def toleration_violations(
    where: str, tolerations: list[dict[str, Any]], policy: TenantPolicy
) -> list[str]:
    allowed = set(policy.tolerations)
    listed = ", ".join(_shown(t.model_dump()) for t in policy.tolerations) or "none"
    return [
        f"{where}.tolerations[{i}]={_shown(value)}: namespace {policy.namespace} may not use "
        f"this toleration (allowed, exactly: {listed}); ask the platform's administrators to "
        "add it to tenants[].tolerations"
        for i, value in enumerate(tolerations)
        if _as_toleration(value) not in allowed
    ]


def selector_violations(where: str, selector: Mapping[str, str], policy: TenantPolicy) -> list[str]:
    out: list[str] = []
    for key, value in selector.items():
        values = policy.node_selectors.get(key)
        if values is not None and value in values:
            continue
        allowed = ", ".join(f"{k} in ({', '.join(v)})" for k, v in policy.node_selectors.items())
        out.append(
            f"{where}.node_selector.{key}={value!r}: namespace {policy.namespace} may not select "
            f"these nodes (allowed: {allowed or 'none'}); ask the platform's administrators to "
            "add it to tenants[].nodeSelectors"
        )
    return out


def check(exp: Experiment, policy: TenantPolicy, _: Platform) -> list[str]:
    """The scheduling area of the tenant policy: priority class, tolerations, node selectors."""
    out = priority_violations(exp, policy)
    for where, tolerations, selector in _placements(exp):
        out += toleration_violations(where, tolerations, policy)
        out += selector_violations(where, selector, policy)
    return out
