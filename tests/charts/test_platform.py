"""sarl-platform wiring: credentials only by Secret reference, MLflow reachable by in-cluster
names and writing artifacts to the object store, MinIO vs external S3, operator RBAC."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.charts.rendering import CASES, NAMESPACE, PLATFORM, Case, objects, objects_of_kind

PLATFORM_CASES = [c for c in CASES if c.chart == PLATFORM]
SECRET_ENV = re.compile(r"(PASSWORD|ACCESS_KEY_ID$|SECRET_ACCESS_KEY$|TOKEN|ROOT_USER$|STORE_URI$)")


def _by_component(case: Case, kind: str, component: str) -> dict[str, Any]:
    (found,) = (
        o
        for o in objects_of_kind(case, kind)
        if o["metadata"]["labels"]["app.kubernetes.io/component"] == component
    )
    return found


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    pod = obj["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _arg(args: list[str], flag: str) -> str:
    (value,) = (a.split("=", 1)[1] for a in args if a.startswith(f"{flag}="))
    return value


@pytest.mark.parametrize("case", PLATFORM_CASES, ids=lambda c: c.id)
def test_credentials_only_by_secret_reference(case: Case) -> None:
    assert not objects_of_kind(case, "Secret"), "the chart must not create Secrets"
    for obj in objects(case):
        if "template" not in obj.get("spec", {}):
            continue
        for container in _containers(obj):
            for name, env in _env(container).items():
                if SECRET_ENV.search(name):
                    assert "value" not in env, f"{obj['metadata']['name']}: {name} in plaintext"
                    assert env["valueFrom"]["secretKeyRef"]["name"], name
            assert not any("://" in a and "@" in a for a in container.get("args", [])), (
                "a URI with credentials in the command line"
            )


@pytest.mark.parametrize("case", PLATFORM_CASES, ids=lambda c: c.id)
def test_mlflow_accepts_in_cluster_host_headers(case: Case) -> None:
    security = pytest.importorskip("mlflow.server.security_utils")
    mlflow = _by_component(case, "Deployment", "mlflow")
    allowed = _arg(_containers(mlflow)[0]["args"], "--allowed-hosts").split(",")
    svc = _by_component(case, "Service", "mlflow")["metadata"]["name"]
    port = _by_component(case, "Service", "mlflow")["spec"]["ports"][0]["port"]
    for host in (
        svc,
        f"{svc}:{port}",
        f"{svc}.{NAMESPACE}:{port}",
        f"{svc}.{NAMESPACE}.svc:{port}",
        f"{svc}.{NAMESPACE}.svc.cluster.local:{port}",
        "localhost:5000",
        f"10.1.2.3:{port}",
        f"172.20.0.1:{port}",
    ):
        assert security.is_allowed_host_header(allowed, host), host
    for host in ("evil.example.com", f"{svc}.evil.example.com:{port}", "172.32.0.1:5000"):
        assert not security.is_allowed_host_header(allowed, host), host
    for extra in case.load_values().get("mlflow", {}).get("allowedHosts", []):
        assert security.is_allowed_host_header(allowed, extra)


def test_mlflow_default_sqlite_minio() -> None:
    case = Case(PLATFORM)
    (container,) = _containers(_by_component(case, "Deployment", "mlflow"))
    args, env = container["args"], _env(container)
    assert _arg(args, "--artifacts-destination") == "s3://sarl/mlflow"
    assert _arg(args, "--backend-store-uri") == "sqlite:////mlflow/mlflow.db"
    assert "--serve-artifacts" in args
    assert env["MLFLOW_S3_ENDPOINT_URL"]["value"] == (
        f"http://sarl-platform-minio.{NAMESPACE}.svc.cluster.local:9000"
    )
    assert _by_component(case, "PersistentVolumeClaim", "mlflow")
    assert {o["kind"] for o in objects(case) if "minio" in o["metadata"]["name"]} == {
        "Deployment",
        "Service",
        "PersistentVolumeClaim",
        "Job",
    }
    job = _by_component(case, "Job", "minio-setup")
    assert "post-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    minio_env = _env(_containers(_by_component(case, "Deployment", "minio"))[0])
    assert minio_env["MINIO_ROOT_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "sarl-s3-credentials",
        "key": "AWS_SECRET_ACCESS_KEY",
    }


def test_external_s3_and_database_backend() -> None:
    case = Case(PLATFORM, "external-s3")
    assert not [o for o in objects(case) if "minio" in o["metadata"]["name"]]
    mlflow = _by_component(case, "Deployment", "mlflow")
    (container,) = _containers(mlflow)
    args, env = container["args"], _env(container)
    assert mlflow["spec"]["replicas"] == 2
    assert not any(a.startswith("--backend-store-uri") for a in args)
    assert env["MLFLOW_BACKEND_STORE_URI"]["valueFrom"]["secretKeyRef"] == {
        "name": "mlflow-db",
        "key": "uri",
    }
    assert env["MLFLOW_S3_ENDPOINT_URL"]["value"] == "https://s3.eu-west-1.amazonaws.com"
    assert env["AWS_DEFAULT_REGION"]["value"] == "eu-west-1"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "s3-credentials",
        "key": "access-key-id",
    }
    assert _arg(args, "--artifacts-destination") == "s3://sarl-artifacts/mlflow"
    assert _arg(args, "--cors-allowed-origins") == "https://mlflow.example.com"
    assert not objects_of_kind(case, "PersistentVolumeClaim")  # no SQLite, no MinIO


@pytest.mark.parametrize("case", PLATFORM_CASES, ids=lambda c: c.id)
def test_operator_is_wired_to_the_platform(case: Case) -> None:
    operator = _by_component(case, "Deployment", "operator")
    (container,) = _containers(operator)
    env = _env(container)
    assert env["SARL_MLFLOW_TRACKING_URI"]["value"].startswith("http://sarl-platform-mlflow.")
    assert env["SARL_S3_CREDENTIALS_SECRET"]["value"] == (
        case.load_values()
        .get("objectStore", {})
        .get("credentials", {})
        .get("existingSecret", "sarl-s3-credentials")
    )
    sa = _by_component(case, "ServiceAccount", "operator")["metadata"]["name"]
    assert operator["spec"]["template"]["spec"]["serviceAccountName"] == sa
    assert operator["spec"]["replicas"] == 1 and operator["spec"]["strategy"]["type"] == "Recreate"


NEEDED = {
    # A Study creates its arm x seed Experiments.
    ("sarl.dev", "experiments"): {"get", "list", "watch", "create", "patch", "delete"},
    ("sarl.dev", "experiments/status"): {"get", "patch"},
    ("sarl.dev", "studies"): {"get", "list", "watch", "patch"},
    ("sarl.dev", "studies/status"): {"get", "patch"},
    # kopf's finalizer (the Study has a timer), and blockOwnerDeletion on its children.
    ("sarl.dev", "studies/finalizers"): {"update"},
    ("batch", "jobs"): {"get", "create"},
    ("kubeflow.org", "pytorchjobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("serving.kserve.io", "inferenceservices"): {
        "get",
        "list",
        "watch",
        "create",
        "patch",
        "delete",
    },
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "events"): {"create"},
    ("", "pods"): {"get", "list", "watch"},
    ("", "pods/log"): {"get"},
}


def _granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def _assert_operator_rules(role: dict[str, Any]) -> None:
    granted = _granted(role)
    for key, verbs in NEEDED.items():
        assert verbs <= granted.get(key, set()), (role["metadata"]["name"], key)
    assert ("", "secrets") not in granted, "the operator references Secrets, never reads them"


def test_cluster_wide_rbac() -> None:
    case = Case(PLATFORM)
    roles = {r["metadata"]["name"]: r for r in objects_of_kind(case, "ClusterRole")}
    _assert_operator_rules(roles["sarl-platform-operator"])
    framework = _granted(roles["sarl-platform-operator-framework"])
    assert {"list", "watch"} <= framework[("apiextensions.k8s.io", "customresourcedefinitions")]
    assert not objects_of_kind(case, "Role")
    bindings = {b["roleRef"]["name"]: b for b in objects_of_kind(case, "ClusterRoleBinding")}
    assert set(bindings) == set(roles)
    for binding in bindings.values():
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "sarl-platform-operator", "namespace": NAMESPACE}
        ]
    args = _containers(_by_component(case, "Deployment", "operator"))[0]["args"]
    assert "--all-namespaces" in args


def test_namespaced_rbac() -> None:
    case = Case(PLATFORM, "namespaced")
    roles = objects_of_kind(case, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        _assert_operator_rules(role)
    bindings = objects_of_kind(case, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert [r["metadata"]["name"] for r in objects_of_kind(case, "ClusterRole")] == [
        "sarl-platform-operator-framework"
    ]
    args = _containers(_by_component(case, "Deployment", "operator"))[0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args and "--debug" in args
    volumes = _by_component(case, "Deployment", "mlflow")["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "data", "emptyDir": {}}]
