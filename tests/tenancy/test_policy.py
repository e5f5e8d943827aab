"""Tenancy suite, policy: team-a's specs that reach outside its tenant policy against the real
operator and its real admission webhook (issue 36 items 4, 5, 7).

The operator runs as a subprocess (``kopf run``, :mod:`tests.operators.operator_process`) with
``SARL_TENANTS`` naming team-a and team-b, against the in-memory API server of
:mod:`tests.support.kube_server` (no real API server can run here: it calls no webhook and runs no
controllers, so the handlers' own check is what refuses there) and the real MLflow server. The
webhook is the same ``sarl_operator.admission`` module served over HTTPS by kopf's WebhookServer,
answering AdmissionReview v1 requests built as the API server sends them (test_admission.py's
pattern, with a certificate made here). Each attack's spec is refused with a message naming the
field, and nothing is created for it: no child object, no MLflow run, no connection to a URI it
names.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

pytest.importorskip("kmock")
from kubernetes import dynamic

from sarl.cluster.tenancy import TENANT_SECRET, TenantKeys, platform_copy_name
from tests.operators.operator_process import (
    Operator,
    client_for,
    condition,
    create,
    running_operator,
    wait_for,
)
from tests.operators.study_cases import small_doc
from tests.operators.tenant_cases import (
    ATTACKS,
    TEAM_A,
    TEAM_B,
    TENANTS_JSON,
    experiment_doc,
)
from tests.support.kube_server import (
    CONFIGMAPS,
    EXPERIMENTS,
    ISVCS,
    JOBS,
    PYTORCHJOBS,
    SARL_RESOURCES,
    KubeServer,
    Resource,
    kube_server,
)
from tests.support.mlflow_server import free_port

PLATFORM_NAMESPACE: Final = "sarl"
STUDIES: Final = Resource("sarl.dev", "v1alpha1", "studies", "Study", subresources=("status",))
CHILDREN: Final = (CONFIGMAPS, PYTORCHJOBS, ISVCS, JOBS)


class Listener:
    """An "internal service" on a free port that counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server((*SARL_RESOURCES, STUDIES)) as ks:
        yield ks


@pytest.fixture(scope="module")
def operator(
    server: KubeServer, mlflow_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    env = {
        "SARL_TENANTS": TENANTS_JSON,
        "SARL_MLFLOW_TRACKING_URI": mlflow_server.url,
        "SARL_STATUS_INTERVAL_S": "1",
        "SARL_RETRY_DELAY_S": "1",
        "SARL_TRAINER_IMAGE": "ghcr.io/sarl-dev/sarl-verl:test",
        "SARL_S3_BUCKET": "sarl",
        "SARL_S3_CREDENTIALS_SECRET": "sarl-s3-credentials",
        "SARL_OPERATOR_NAMESPACE": PLATFORM_NAMESPACE,
    }
    with running_operator(server, TEAM_A, tmp_path_factory.mktemp("operator"), env) as op:
        yield op


@pytest.fixture(scope="module")
def kube(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> dynamic.DynamicClient:
    client = client_for(server, TEAM_A, tmp_path_factory)
    data = {
        k: base64.b64encode(f"team-a-{i}".encode()).decode() for i, k in enumerate(TenantKeys.ALL)
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": TENANT_SECRET},
        "data": data,
    }
    secrets = client.resources.get(api_version="v1", kind="Secret")
    for namespace in (TEAM_A, TEAM_B):
        secrets.create(body=secret, namespace=namespace)
        # Its copy in the platform namespace: the operator tracks as the tenant's MLflow user.
        copy = {**secret, "metadata": {"name": platform_copy_name(namespace)}}
        secrets.create(body=copy, namespace=PLATFORM_NAMESPACE)
    return client


def _failed(server: KubeServer, resource: Resource, namespace: str, name: str) -> Any:
    status = server.objects(resource, namespace).get(name, {}).get("status") or {}
    return condition(status, "Ready") if status.get("phase") == "Failed" else None


def _children(server: KubeServer, namespace: str, name: str) -> list[str]:
    return [
        f"{r.kind}/{n}"
        for r in CHILDREN
        for n in server.objects(r, namespace)
        if n.startswith(name)
    ]


def _mlflow_experiments(mlflow_server: Any) -> list[str]:
    import httpx

    reply = httpx.post(
        f"{mlflow_server.url}/api/2.0/mlflow/experiments/search",
        json={"max_results": 1000},
        timeout=10,
    )
    return [e["name"] for e in reply.json().get("experiments", [])]


def test_team_as_own_spec_runs_with_team_as_own_identity(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, mlflow_server: Any
) -> None:
    """The control: a spec inside team-a's policy gets its job, whose pods carry team-a's own
    credentials (Secret ``sarl-tenant``: store key pair, MLflow user, checkpoint key, Ray token,
    serving key) and never the platform's root store Secret; its MLflow experiment is
    ``team-a/<name>``."""
    from tests.operators.test_operator import kserve_standin

    with kserve_standin(server, TEAM_A):  # KServe's controller cannot run here
        create(kube, TEAM_A, "Experiment", experiment_doc("own"))
        try:
            job = wait_for(
                "the PyTorchJob of team-a's valid Experiment",
                lambda: server.objects(PYTORCHJOBS, TEAM_A).get("own"),
            )
        except AssertionError as e:
            status = server.objects(EXPERIMENTS, TEAM_A).get("own", {}).get("status")
            raise AssertionError(f"{e}\nstatus: {status}\n{operator.log()}") from None
    replicas = job["spec"]["pytorchReplicaSpecs"]
    refs = [
        e["valueFrom"]["secretKeyRef"]
        for spec in replicas.values()
        for c in spec["template"]["spec"]["containers"]
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    ]
    assert {r["name"] for r in refs} == {TENANT_SECRET}
    assert {r["key"] for r in refs} >= set(TenantKeys.ALL)
    assert "team-a/own" in _mlflow_experiments(mlflow_server)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_each_attack_by_team_a_is_refused_naming_the_field_and_builds_nothing(
    operator: Operator,
    server: KubeServer,
    kube: dynamic.DynamicClient,
    mlflow_server: Any,
    attack: str,
) -> None:
    """team-a sends team-b's or the platform's credentials to itself (``api_key_env:
    AWS_SECRET_ACCESS_KEY``, ``hf_token`` of team-b's Secret, the root store Secret), outranks
    or lands on others' nodes (``system-cluster-critical``, team-b's toleration and node pool)
    or points the operator at an internal address (``mlflow_uri``): the Experiment ends Failed,
    ``InvalidSpec``, the message naming the field; no ConfigMap, job, served model or MLflow run
    is made for it."""
    patch, field = ATTACKS[attack]
    create(kube, TEAM_A, "Experiment", experiment_doc(attack, patch))
    ready = wait_for(
        f"Experiment {attack} Failed\n{operator.log()}",
        lambda: _failed(server, EXPERIMENTS, TEAM_A, attack),
    )
    assert ready["reason"] == "InvalidSpec" and ready["message"].startswith(field)
    time.sleep(2)  # two status ticks: the timer creates nothing either
    assert _children(server, TEAM_A, attack) == []
    assert not [n for n in _mlflow_experiments(mlflow_server) if attack in n]


def test_the_operator_never_calls_an_mlflow_uri_a_tenant_names(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    """The port-scan attack: ``spec.tracking.mlflow_uri`` at an address the operator reaches
    from the platform namespace. Refused, and not one connection is made to it."""
    internal = Listener()
    doc = experiment_doc("scan", {"tracking": {"mlflow_uri": f"http://127.0.0.1:{internal.port}"}})
    create(kube, TEAM_A, "Experiment", doc)
    ready = wait_for(
        f"Experiment scan Failed\n{operator.log()}",
        lambda: _failed(server, EXPERIMENTS, TEAM_A, "scan"),
    )
    assert (
        "spec.tracking.mlflow_uri=" in ready["message"] and str(internal.port) in ready["message"]
    )
    time.sleep(2)
    assert internal.connections == 0


def test_a_study_arm_with_team_bs_node_pool_creates_no_run(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    doc = small_doc("pool-st")
    doc["spec"]["arms"][1]["override"]["resources"] = {"node_selector": {"pool": "team-b"}}
    create(kube, TEAM_A, "Study", doc)
    ready = wait_for(
        f"Study pool-st Failed\n{operator.log()}",
        lambda: _failed(server, STUDIES, TEAM_A, "pool-st"),
    )
    assert (
        "spec.arms[1] (high, seed 0): spec.resources.node_selector.pool='team-b'"
        in (ready["message"])
    )
    time.sleep(2)
    assert not [n for n in server.objects(EXPERIMENTS, TEAM_A) if n.startswith("pool-st")]


def test_a_namespace_that_is_not_a_tenant_gets_nothing(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    create(kube, "team-c", "Experiment", experiment_doc("outsider"))
    ready = wait_for(
        f"Experiment outsider Failed\n{operator.log()}",
        lambda: _failed(server, EXPERIMENTS, "team-c", "outsider"),
    )
    assert "namespace 'team-c' is not a tenant of this platform" in ready["message"]
    assert _children(server, "team-c", "outsider") == []


# ---- the admission webhook as the chart deploys it (kopf run --module=sarl_operator.admission)


def _certificate(tmp: Path) -> tuple[Path, Path, str]:
    """A self-signed certificate for 127.0.0.1 (the chart's genCA stands in): (cert, key, PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sarl-webhook")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp / "tls.crt").write_bytes(pem)
    (tmp / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tmp / "tls.crt", tmp / "tls.key", pem.decode()


@pytest.fixture(scope="module")
def webhook(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.operators.test_rbac import ChartOperator

    tmp = tmp_path_factory.mktemp("webhook")
    cert, key, pem = _certificate(tmp)
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(server.kubeconfig(tmp / "kubeconfig", TEAM_A)),
        "SARL_TENANTS": TENANTS_JSON,
        "SARL_MLFLOW_TRACKING_URI": "http://sarl-mlflow.sarl-system.svc:5000",
        "SARL_WEBHOOK_PORT": str(port),
        "SARL_WEBHOOK_CERT_FILE": str(cert),
        "SARL_WEBHOOK_KEY_FILE": str(key),
    }
    op = ChartOperator(env=env, log_path=tmp / "webhook.log", args=["--standalone", "-A"])
    op.start()
    try:
        wait_for(f"the webhook on {port}\n{op.log()}", lambda: _listening(port), 60)
        yield port, pem, op
    finally:
        op.stop()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _admit(webhook: Any, body: dict[str, Any], namespace: str) -> dict[str, Any]:
    """POST an AdmissionReview v1 CREATE as the API server would, verifying the certificate."""
    import httpx

    from sarl_operator.admission import WEBHOOK_ID

    port, pem, _ = webhook
    body = {**body, "metadata": {**body["metadata"], "namespace": namespace}}
    gvk = {"group": "sarl.dev", "version": "v1alpha1", "kind": body["kind"]}
    plural = "studies" if body["kind"] == "Study" else "experiments"
    gvr = {"group": "sarl.dev", "version": "v1alpha1", "resource": plural}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": body["metadata"]["name"],
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "team-a-user", "groups": ["system:authenticated"]},
            "object": body,
            "oldObject": None,
            "dryRun": False,
        },
    }
    context = ssl.create_default_context(cadata=pem)
    with httpx.Client(verify=context, timeout=30) as client:
        reply = client.post(f"https://127.0.0.1:{port}/{WEBHOOK_ID}", json=review)
    reply.raise_for_status()
    response: dict[str, Any] = reply.json()["response"]
    return response


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_webhook_refuses_each_attack_with_the_message(webhook: Any, attack: str) -> None:
    """The same attacks through the admission webhook: refused (422) before anything is
    stored, with the handlers' message naming the field."""
    patch, field = ATTACKS[attack]
    answer = _admit(webhook, experiment_doc(attack, patch), TEAM_A)
    assert answer["allowed"] is False, webhook[2].log()
    assert answer["status"]["code"] == 422 and answer["status"]["message"].startswith(field)


def test_the_webhook_admits_team_as_own_spec_and_refuses_an_outsider(webhook: Any) -> None:
    assert _admit(webhook, experiment_doc("fine"), TEAM_A)["allowed"] is True
    outsider = _admit(webhook, experiment_doc("outsider"), "kube-system")
    assert outsider["allowed"] is False
    assert "'kube-system' is not a tenant" in outsider["status"]["message"]
