"""sarl_operator.tenant_scheduling: the priority class, tolerations and node selectors a
tenant's spec may give its pods (issue 36 item 7). Pure checks on validated Experiments."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.spec.loader import load_experiment
from sarl_operator import tenant_scheduling
from tests.operators.tenant_cases import (
    A_TOLERATION,
    B_TOLERATION,
    PLATFORM,
    TEAM_A,
    experiment_doc,
)


def _violations(patch: dict[str, Any]) -> list[str]:
    doc = experiment_doc("exp", patch)
    doc["metadata"]["namespace"] = TEAM_A
    policy = PLATFORM.tenancy.policy(TEAM_A)
    assert policy is not None
    return tenant_scheduling.check(load_experiment(doc), policy, PLATFORM)


@pytest.mark.parametrize(
    "patch",
    [
        {},
        {"resources": {"priority_class": "team-a-batch"}},
        {"resources": {"tolerations": [A_TOLERATION], "node_selector": {"pool": "team-a"}}},
        {"serving": {"judge": {"tolerations": [A_TOLERATION]}}},
    ],
)
def test_what_the_policy_lists_passes(patch: dict[str, Any]) -> None:
    assert _violations(patch) == []


@pytest.mark.parametrize("name", ["system-cluster-critical", "system-node-critical", "system-x"])
def test_system_priority_classes_are_always_refused(name: str) -> None:
    (message,) = _violations({"resources": {"priority_class": name}})
    assert message.startswith(f"spec.resources.priority_class={name!r}: the system- priority")


def test_a_priority_class_not_listed_is_refused_naming_the_allowed() -> None:
    (message,) = _violations({"resources": {"priority_class": "team-b-batch"}})
    assert "allowed: team-a-batch" in message and "tenants[].priorityClasses" in message


@pytest.mark.parametrize(
    "toleration",
    [
        B_TOLERATION,
        {"operator": "Exists"},  # tolerates every taint
        {**A_TOLERATION, "tolerationSeconds": 60},  # not exactly the policy's entry
        {"key": "team-a-gpus", "effect": "NoSchedule"},  # Equal, not the listed Exists
    ],
)
def test_a_toleration_must_equal_a_listed_one(toleration: dict[str, Any]) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("spec.resources", {"resources": {"tolerations": [A_TOLERATION, toleration]}}),
        ("spec.serving.embedding", {"serving": {"embedding": {"tolerations": [toleration]}}}),
    ]
    for where, patch in cases:
        (message,) = _violations(patch)
        index = 1 if where == "spec.resources" else 0
        assert message.startswith(f"{where}.tolerations[{index}]=")
        assert "team-a-gpus" in message and "tenants[].tolerations" in message


@pytest.mark.parametrize(
    ("selector", "field"),
    [({"pool": "team-b"}, "pool='team-b'"), ({"kubernetes.io/hostname": "n1"}, "kubernetes.io")],
)
def test_a_node_selector_needs_a_listed_key_and_value(selector: dict[str, str], field: str) -> None:
    (message,) = _violations({"resources": {"node_selector": selector}})
    assert message.startswith(f"spec.resources.node_selector.{field}")
    assert "allowed: pool in (team-a)" in message
