"""The tenant policy wired into the handlers and the webhook (sarl_operator.tenant_review,
experiment_handlers.experiment_from_body, study_handlers.study_from_body,
admission_plan.spec_violation): a spec outside its namespace's policy fails with
``InvalidSpec`` naming the field before anything is built or MLflow is called, its timer creates
nothing, and the webhook refuses it. Kubernetes API: the in-memory fake of test_handlers (no API
server runs here); the real operator and webhook processes are in tests/tenancy/test_policy.py.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import kopf
import pytest

from sarl.spec.loader import load_study
from sarl_operator import experiment_handlers, study_handlers
from sarl_operator.admission import refusal
from sarl_operator.reconcile import Settings
from sarl_operator.tenant_review import study_violations
from tests.operators.study_cases import small_doc
from tests.operators.tenant_cases import (
    ATTACKS,
    B_TOLERATION,
    PLATFORM,
    TEAM_A,
    TENANTS_JSON,
    TRACKING_URI,
    experiment_doc,
)
from tests.operators.test_handlers import FakeApi, FakeTracker

SETTINGS = Settings(verl_image="img", platform=PLATFORM, tracking_uri=TRACKING_URI)
ENV = {"SARL_TENANTS": TENANTS_JSON, "SARL_MLFLOW_TRACKING_URI": TRACKING_URI}


def _body(doc: dict[str, Any], namespace: str = TEAM_A) -> dict[str, Any]:
    meta = {"name": doc["metadata"]["name"], "namespace": namespace, "uid": "u1", "generation": 1}
    return {**copy.deepcopy(doc), "metadata": meta}


def _study(
    arm_patch: dict[str, Any] | None = None, base_patch: dict[str, Any] | None = None
) -> dict[str, Any]:
    doc = small_doc("st")
    doc["spec"]["base"].update(base_patch or {})
    doc["spec"]["arms"][1]["override"].update(arm_patch or {})
    return doc


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_experiment_outside_the_policy_fails_before_anything_is_built(attack: str) -> None:
    patch_spec, field = ATTACKS[attack]
    api, events, tracker = FakeApi(), list[tuple[str, ...]](), FakeTracker()
    patch: dict[str, Any] = {}
    body = _body(experiment_doc(attack, patch_spec))
    with pytest.raises(kopf.PermanentError, match=re.escape(field.split("=")[0])):
        experiment_handlers.reconcile(
            body,
            patch,
            api,
            settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: tracker,
        )
    assert api.writes == [] and tracker.calls == []
    ready = patch["status"]["conditions"][0]
    assert (patch["status"]["phase"], ready["reason"]) == ("Failed", "InvalidSpec")
    assert ready["message"].startswith(field)
    # The timer computes nothing for it (no evaluation Job, no served model).
    body["status"] = patch["status"]
    api.objects[("sarl.dev/v1alpha1", "Experiment", TEAM_A, attack)] = body
    experiment_handlers.refresh(body, {}, api, settings=SETTINGS, post_event=lambda *_: None)
    assert api.writes == []


def test_a_namespace_that_is_not_a_tenant_is_refused_whole() -> None:
    with pytest.raises(ValueError, match="namespace 'team-c' is not a tenant"):
        experiment_handlers.experiment_from_body(_body(experiment_doc("e"), "team-c"), PLATFORM)


def test_a_study_names_the_base_once_and_an_arm_once_per_arm() -> None:
    doc = _study(
        arm_patch={"resources": {"tolerations": [B_TOLERATION]}},
        base_patch={"tracking": {"mlflow_uri": "http://10.0.0.1:1"}},
    )
    doc["metadata"]["namespace"] = TEAM_A
    study = load_study(doc)
    messages = study_violations(study, study.runs(), TEAM_A, PLATFORM)
    assert [m.split("=")[0] for m in messages] == [
        "spec.base.tracking.mlflow_uri",
        "spec.arms[1] (high, seed 0): spec.resources.tolerations[0]",
    ]


def test_a_study_outside_the_policy_fails_and_creates_no_run() -> None:
    api, events, tracker = FakeApi(), list[tuple[str, ...]](), FakeTracker()
    body = _body(_study(arm_patch={"resources": {"priority_class": "system-node-critical"}}))
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.PermanentError, match=r"spec\.arms\[1\] \(high, seed 0\)"):
        study_handlers.reconcile(
            body,
            patch,
            api,
            settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: tracker,
        )
    assert api.writes == [] and tracker.calls == []
    assert patch["status"]["phase"] == "Failed"
    body["status"] = patch["status"]
    api.objects[("sarl.dev/v1alpha1", "Study", TEAM_A, "st")] = body
    study_handlers.refresh(body, {}, api, settings=SETTINGS, post_event=lambda *_: None)
    assert api.writes == []


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_webhook_refuses_a_create_and_a_spec_update(attack: str) -> None:
    patch_spec, field = ATTACKS[attack]
    body = _body(experiment_doc(attack, patch_spec))
    assert (refusal(body, "CREATE", None, ENV) or "").startswith(field)
    old = _body(experiment_doc(attack))
    assert refusal(old, "CREATE", None, ENV) is None
    assert (refusal(body, "UPDATE", old, ENV) or "").startswith(field)
    # An UPDATE of metadata alone (kopf's finalizer) passes whatever the spec says.
    assert refusal(body, "UPDATE", copy.deepcopy(body), ENV) is None


def test_the_webhook_refuses_a_study_and_another_namespace() -> None:
    study = _body(_study(arm_patch={"resources": {"node_selector": {"pool": "team-b"}}}))
    assert "spec.arms[1] (high, seed 0): spec.resources.node_selector.pool" in str(
        refusal(study, "CREATE", None, ENV)
    )
    outsider = _body(experiment_doc("e"), "kube-system")
    assert "'kube-system' is not a tenant" in str(refusal(outsider, "CREATE", None, ENV))
    assert refusal(outsider, "CREATE", None, {}) is None  # no tenants: a single-team install
