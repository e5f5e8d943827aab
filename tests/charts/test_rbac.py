"""sarl-platform RBAC for users and for the operator's scope, from the rendered chart.

Users: two ClusterRoles aggregated into the built-in ``view`` and ``edit``/``admin``. The
``sarl`` commands are run (typer's CliRunner, the real cluster client, real HTTP) against the
in-memory Kubernetes API server (:mod:`tests.support.kube_server`, kmock's emulation with the
``studies`` resource declared; no real cluster here), every request is recorded, and each call
must be allowed by ``view`` (status, logs, wait) or ``edit`` (submit, delete) as aggregated from
this chart's roles in a namespace (a RoleBinding), so a new client call without a matching rule
fails here. The operator's own rules are pinned to its calls in tests/operators/test_rbac.py;
here only their shape (bindings, scope, nothing it does not need).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tests.charts.rendering import NAMESPACE, PLATFORM, Case, objects, objects_of_kind
from tests.rbac import (
    AGGREGATE,
    Call,
    Grant,
    default_role_rules,
    denied,
    recorded,
    request_count,
    subject_grants,
)

TEAM: Final = "team-a"
SA: Final = ("ServiceAccount", "sarl-platform-operator", NAMESPACE)
SARL_RESOURCES_RW = ("experiments", "studies")


def _user_roles(case: Case) -> dict[str, dict[str, Any]]:
    return {
        r["metadata"]["name"]: r
        for r in objects_of_kind(case, "ClusterRole")
        if r["metadata"]["labels"]["app.kubernetes.io/component"] == "user-rbac"
    }


# ---- the aggregated user roles, as rendered ----


def test_user_roles_aggregate_into_view_edit_and_admin() -> None:
    roles = _user_roles(Case(PLATFORM))
    view, edit = roles["sarl-platform-view"], roles["sarl-platform-edit"]
    aggregation = {k: v for k, v in view["metadata"]["labels"].items() if "aggregate-to" in k}
    assert aggregation == {AGGREGATE["view"]: "true"}
    aggregation = {k: v for k, v in edit["metadata"]["labels"].items() if "aggregate-to" in k}
    assert aggregation == {AGGREGATE["edit"]: "true", AGGREGATE["admin"]: "true"}
    assert view["rules"] == [
        {
            "apiGroups": ["sarl.dev"],
            "resources": ["experiments", "studies", "experiments/status", "studies/status"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert edit["rules"] == [
        {
            "apiGroups": ["sarl.dev"],
            "resources": ["experiments", "studies"],
            "verbs": ["create", "update", "patch", "delete", "get", "list", "watch"],
        },
        {
            "apiGroups": ["sarl.dev"],
            "resources": ["experiments/status", "studies/status"],
            "verbs": ["get"],
        },
    ]


def test_user_roles_can_be_switched_off() -> None:
    from tests.charts.rendering import render_templates

    rendered = render_templates(PLATFORM, {"rbac": {"aggregateToDefaultRoles": False}})
    assert "sarl-platform/templates/user-rbac.yaml" not in rendered or not yaml.safe_load(
        rendered["sarl-platform/templates/user-rbac.yaml"]
    )


def test_users_cannot_write_status() -> None:
    """Status is the operator's: no default role may write it."""
    rules = default_role_rules("admin", objects(Case(PLATFORM)))
    grants = [Grant(r, TEAM, "admin") for r in rules]
    for resource in ("experiments/status", "studies/status"):
        for verb in ("update", "patch"):
            assert denied(grants, [Call("sarl.dev", resource, verb, TEAM, "x")])


# ---- what the sarl CLI calls, against the aggregated roles ----


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    pytest.importorskip("kmock")
    from tests.sarl.cluster.study_server import WITH_STUDIES
    from tests.support.kube_server import kube_server

    with kube_server(WITH_STUDIES) as ks:
        yield ks


def _seed_pod(server: Any, experiment: str) -> None:
    """The training master pod, stored directly (no request): the Training Operator's job."""
    from tests.support.kube_server import PODS

    labels = {
        "training.kubeflow.org/job-name": experiment,
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{experiment}-master-0", "namespace": TEAM, "labels": labels},
        "spec": {"containers": [{"name": "pytorch"}]},
        "status": {"phase": "Running"},
    }
    server.put(PODS, TEAM, pod)
    server.set_log(TEAM, f"{experiment}-master-0", "step 1\n")


@pytest.fixture(scope="module")
def cli_calls(server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Call]]:
    """Run every sarl command once (as a user in namespace team-a); the calls of each."""
    from typer.testing import CliRunner

    from sarl.cli.main import app
    from tests.sarl.cluster.conftest import experiment_doc, set_status
    from tests.sarl.cluster.study_server import set_study_status, study_doc

    tmp = tmp_path_factory.mktemp("cli-rbac")
    kubeconfig = server.kubeconfig(tmp / "kubeconfig", TEAM)
    exp, study = tmp / "exp.yaml", tmp / "study.yaml"
    exp.write_text(yaml.safe_dump(experiment_doc("rbac-exp")))
    study.write_text(yaml.safe_dump(study_doc("rbac-st")))
    runner = CliRunner()
    calls: dict[str, list[Call]] = {}

    def sarl(label: str, *args: str) -> None:
        mark = request_count(server)
        result = runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig)])
        assert result.exit_code == 0, (label, result.stdout, result.stderr)
        calls[label] = [r.call for r in recorded(server, since=mark)]

    sarl("submit", "submit", str(exp))
    sarl("submit --replace", "submit", str(exp), "--replace")
    sarl("submit (study)", "submit", str(study))
    sarl("status", "status")
    sarl("status NAME", "status", "rbac-exp")
    sarl("status --kind study", "status", "--kind", "study")
    sarl("status STUDY", "status", "rbac-st")
    _seed_pod(server, "rbac-exp")
    sarl("logs", "logs", "rbac-exp", "--tail", "5")
    set_status(server, TEAM, "rbac-exp", {"phase": "Succeeded"})
    sarl("wait", "wait", "rbac-exp", "--interval", "0.01")
    set_study_status(server, TEAM, "rbac-st", {"phase": "Succeeded"})
    sarl("wait (study)", "wait", "rbac-st", "--interval", "0.01")
    sarl("delete", "delete", "rbac-exp")
    sarl("delete --wait (study)", "delete", "rbac-st", "--wait", "--timeout", "5")
    sarl("status -A", "status", "-A")
    return calls


READ_COMMANDS: Final = (
    "status",
    "status NAME",
    "status --kind study",
    "status STUDY",
    "logs",
    "wait",
    "wait (study)",
)
WRITE_COMMANDS: Final = ("submit", "submit --replace", "submit (study)", "delete")
WRITE_COMMANDS_STUDY: Final = ("delete --wait (study)",)


def _role_grants(role: str, case: Case, namespace: str | None) -> list[Grant]:
    """The built-in ``role`` as aggregated on a cluster with ``case`` installed, bound in
    ``namespace`` (None: a ClusterRoleBinding)."""
    return [Grant(r, namespace, role) for r in default_role_rules(role, objects(case))]


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_read_commands_need_only_view_in_the_namespace(
    cli_calls: dict[str, list[Call]], command: str
) -> None:
    calls = cli_calls[command]
    assert calls, f"sarl {command} made no request"
    assert all(c.namespace == TEAM for c in calls), calls
    assert denied(_role_grants("view", Case(PLATFORM), TEAM), calls) == []


@pytest.mark.parametrize("command", WRITE_COMMANDS + WRITE_COMMANDS_STUDY)
def test_write_commands_need_only_edit_in_the_namespace(
    cli_calls: dict[str, list[Call]], command: str
) -> None:
    calls = cli_calls[command]
    assert calls and all(c.namespace == TEAM for c in calls), calls
    assert denied(_role_grants("edit", Case(PLATFORM), TEAM), calls) == []
    assert denied(_role_grants("view", Case(PLATFORM), TEAM), calls), "a write view allows?"


def test_all_namespaces_needs_view_cluster_wide(cli_calls: dict[str, list[Call]]) -> None:
    calls = cli_calls["status -A"]
    assert calls == [Call("sarl.dev", "experiments", "list")]
    assert denied(_role_grants("view", Case(PLATFORM), TEAM), calls)  # a RoleBinding: no
    assert denied(_role_grants("view", Case(PLATFORM), None), calls) == []


def test_what_the_cli_reads_besides_sarl_resources(cli_calls: dict[str, list[Call]]) -> None:
    """Only pods and their logs (sarl logs), which the built-in view grants: no PyTorchJobs,
    InferenceServices, ConfigMaps or Events, so the chart needs no rules on other groups."""
    used = {(c.group, c.resource, c.verb) for calls in cli_calls.values() for c in calls}
    assert {u for u in used if u[0] != "sarl.dev"} == {
        ("", "pods", "list"),
        ("", "pods/log", "get"),
    }
    assert ("sarl.dev", "experiments", "list") in used  # kubectl get experiments, sarl status


def test_without_the_chart_users_are_refused(cli_calls: dict[str, list[Call]]) -> None:
    """Guard: the built-in roles alone refuse the sarl calls (what issue 11 reported)."""
    builtin = [Grant(r, TEAM, "edit") for r in default_role_rules("edit", [])]
    for command in READ_COMMANDS + WRITE_COMMANDS:
        assert denied(builtin, cli_calls[command]), command


# ---- the operator's roles: scope and bindings (the calls: tests/operators/test_rbac.py) ----


def _operator_grants(case: Case) -> list[Grant]:
    return subject_grants(objects(case), *SA)


@pytest.mark.parametrize("values", ["default", "external-s3", "namespaced", "cluster-wide"])
def test_operator_deletes_only_served_models_and_never_reads_pods_or_other_secrets(
    values: str,
) -> None:
    case = Case(PLATFORM, values)
    grants = _operator_grants(case)
    assert grants
    secret = (
        case.load_values()
        .get("objectStore", {})
        .get("credentials", {})
        .get("existingSecret", "sarl-s3-credentials")
    )
    for grant in grants:
        rule = grant.rule
        assert "*" not in [*rule["apiGroups"], *rule["resources"], *rule["verbs"]], rule
        # The only deletes: kopf's finalizers, and the InferenceServices the operator served
        # for a run that has ended (spec.serving.release), one by one.
        mutating = {"delete", "deletecollection", "update"} & set(rule["verbs"])
        assert (
            not mutating
            or rule["resources"] == ["experiments/finalizers", "studies/finalizers"]
            or (rule["resources"] == ["inferenceservices"] and mutating == {"delete"})
        ), rule
        assert not {"pods", "pods/log"} & set(rule["resources"]), rule
        if "secrets" in rule["resources"]:
            assert rule == {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [secret],
                "verbs": ["get"],
            }


def test_operator_by_default_has_rights_in_its_namespace_only() -> None:
    """No tenants, no list: Roles in the release namespace, no ClusterRole beyond kopf's
    framework (it cannot create Jobs or read Secrets in kube-system or any other namespace)."""
    case = Case(PLATFORM)
    grants = _operator_grants(case)
    scoped = {g.namespace for g in grants if g.role == "sarl-platform-operator"}
    assert scoped == {NAMESPACE}
    assert {g.role for g in grants if g.namespace is None} == {"sarl-platform-operator-framework"}


def test_operator_in_the_tenants_namespaces_only() -> None:
    case = Case(PLATFORM, "tenants")
    grants = _operator_grants(case)
    scoped = {g.namespace for g in grants if g.role == "sarl-platform-operator"}
    assert scoped == {"team-a", "team-b"}
    # The tenant's own credentials Secret is the one more name it may read (StorageReady).
    secrets = [
        g.rule for g in grants if "secrets" in g.rule["resources"] and g.namespace != NAMESPACE
    ]
    assert all(r["resourceNames"] == ["sarl-s3-credentials", "sarl-tenant"] for r in secrets)
    # In its own namespace, the tenants' platform copies only (their MLflow users).
    own = [g.rule for g in grants if "secrets" in g.rule["resources"] and g.namespace == NAMESPACE]
    assert [r["resourceNames"] for r in own] == [["sarl-tenant-team-a", "sarl-tenant-team-b"]]
    # The webhook only checks the tenants' namespaces.
    (config,) = objects_of_kind(case, "ValidatingWebhookConfiguration")
    (expression,) = config["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == ["team-a", "team-b"]


def test_operator_cluster_wide() -> None:
    case = Case(PLATFORM, "cluster-wide")
    grants = _operator_grants(case)
    assert {g.role for g in grants} == {
        "sarl-platform-operator",
        "sarl-platform-operator-framework",
    }
    assert all(g.namespace is None for g in grants)
    assert not objects_of_kind(case, "Role") and not objects_of_kind(case, "RoleBinding")
    framework = [g.rule for g in grants if g.role == "sarl-platform-operator-framework"]
    assert [r["resources"] for r in framework] == [
        ["customresourcedefinitions"],
        ["clustertrainingruntimes"],
    ]


def test_operator_namespaced() -> None:
    case = Case(PLATFORM, "namespaced")
    grants = _operator_grants(case)
    scoped = {g.namespace for g in grants if g.role == "sarl-platform-operator"}
    assert scoped == {"team-a", "team-b"}
    framework = [g for g in grants if g.role == "sarl-platform-operator-framework"]
    assert all(g.namespace is None for g in framework)
    # kopf follows the listed namespaces (created or deleted later) by watching namespaces.
    assert sorted(r for g in framework for r in g.rule["resources"]) == [
        "clustertrainingruntimes",
        "customresourcedefinitions",
        "namespaces",
    ]
    operator_roles = [
        r["metadata"]["name"]
        for r in objects_of_kind(case, "ClusterRole")
        if r["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    ]
    assert operator_roles == ["sarl-platform-operator-framework"]


def test_rules_file_mentions_the_pinning_test() -> None:
    """The rules' comment points at the test that pins them (a reader changing them runs it)."""
    helpers = Path(__file__).resolve().parents[2] / "charts/sarl-platform/templates/_helpers.tpl"
    assert "tests/operators/test_rbac.py" in helpers.read_text(encoding="utf-8")
