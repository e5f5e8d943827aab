"""sarl_operator.admission: which trainer images an Experiment or Study may run.

The pure check first (normalised references, whole-component prefixes, hostile inputs, the
fields of a Study, UPDATEs of objects admitted earlier), the chart's webhook objects (switches,
existing certificates, values the schema refuses), then the webhook for real: the
operator (``kopf run``) with the chart's rendered environment, TLS Secret and webhook path,
answering AdmissionReview v1 requests POSTed over HTTPS to kopf's WebhookServer, the server
certificate checked against the chart's caBundle for the Service name the API server uses. kopf
needs an API server for discovery: the in-memory one of :mod:`tests.support.kube_server` (no
real cluster here, so no API server calls the webhook; the requests are built as it would).
"""

from __future__ import annotations

import base64
import copy
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from sarl.spec.loader import load_study
from sarl_operator.admission import (
    WEBHOOK_ID,
    IdleWebhookServer,
    allowed_registries,
    image_allowed,
    image_fields,
    image_violations,
    new_image_violations,
    parse_image,
    webhook_server,
)
from tests.operators.study_cases import small_doc

SARL: Final = ("ghcr.io/sarl-dev/",)


def experiment(image: object = None, name: str = "exp") -> dict[str, Any]:
    spec: dict[str, Any] = {"algorithm": {"name": "grpo"}}
    if image is not None:
        spec["resources"] = {"image": image}
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name, "namespace": "team-a", "uid": str(uuid.uuid4())},
        "spec": spec,
    }


def study(base_image: str | None = None, arm_images: tuple[str | None, ...] = ()) -> dict[str, Any]:
    doc = small_doc("st")
    if base_image is not None:
        doc["spec"]["base"]["resources"]["image"] = base_image
    for arm, image in zip(doc["spec"]["arms"], arm_images, strict=False):
        if image is not None:
            arm["override"]["resources"] = {"image": image}
    doc["metadata"].update(namespace="team-a", uid=str(uuid.uuid4()))
    return doc


# ---- the pure check ----


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/sarl-dev/sarl-verl:0.1.0",
        "ghcr.io/sarl-dev/sarl-verl",
        "ghcr.io/sarl-dev/team/trainer:v2",
        "ghcr.io/sarl-dev/sarl-trl@sha256:" + "a" * 64,
        "ghcr.io/sarl-dev/sarl-trl:1.0@sha256:" + "b" * 64,
        "GHCR.IO/sarl-dev/sarl-verl:1",  # registry host names are case-insensitive
    ],
)
def test_allowed_images(image: str) -> None:
    assert image_allowed(image, SARL)
    assert image_violations(experiment(image), SARL) == []


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/sarl-dev.evil.com/x:1",  # the prefix continues the component
        "ghcr.io/sarl-devil/x:1",
        "ghcr.io.evil.com/sarl-dev/x:1",  # another registry host
        "evil.io/ghcr.io/sarl-dev/x:1",
        "ghcr.io:443/sarl-dev/x:1",  # a port makes another registry
        "sarl-dev/x:1",  # Docker Hub, not ghcr.io
        "python:3.11",  # docker.io/library/python
    ],
)
def test_refused_images(image: str) -> None:
    assert not image_allowed(image, SARL)
    (message,) = image_violations(experiment(image), SARL)
    assert message == (
        f"spec.resources.image={image!r}: registry not allowed (allowed: ghcr.io/sarl-dev/)"
    )


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/sarl-dev/../evil/x:1",
        "ghcr.io/sarl-dev/./x",
        "ghcr.io//sarl-dev/x",
        " ghcr.io/sarl-dev/x:1",
        "ghcr.io/sarl-dev/x:1 ",
        "ghcr.io/sarl-dev/x:1\nevil.io/y",
        "https://ghcr.io/sarl-dev/x:1",
        "ghcr.io/sarl-dev/x:1/evil",
        "ghcr.io/sarl-dev/X:1",  # repositories are lower case
        "ghcr.io/sarl-dev/\u0445:1",  # a Cyrillic look-alike letter
        "ghcr.io/sarl-dev/x@sha256:short",
        "ghcr.io/sarl-dev/" + "x" * 300,
        12,
        ["ghcr.io/sarl-dev/x"],
    ],
)
def test_invalid_references_are_refused(image: object) -> None:
    assert parse_image(image) is None
    (message,) = image_violations(experiment(image), SARL)
    assert message == f"spec.resources.image={image!r}: not a valid image reference"


def test_normalisation_of_docker_hub_names() -> None:
    hub = ("docker.io/library/",)
    assert image_allowed("python:3.11", hub) and image_allowed("docker.io/python", hub)
    assert image_allowed("index.docker.io/library/python", hub)
    assert not image_allowed("someone/python", hub)
    assert image_allowed("python:3", ("python",))  # a name without "/" is docker.io/library/…
    assert image_allowed("sarl/x:1", ("sarl/",)) and not image_allowed("sarl:1", ("sarl/",))
    assert image_allowed("localhost:5000/x", ("localhost:5000",))
    assert image_allowed("anything.io/x/y", ("anything.io",))


def test_no_allow_list_means_any_image() -> None:
    assert image_violations(experiment("evil.io/x:1"), ()) == []
    assert image_violations(experiment("not a reference"), []) == []


def test_unset_image_uses_the_platform_default() -> None:
    assert image_fields(experiment()) == []
    assert image_fields(experiment("")) == []
    assert image_violations(experiment(), SARL) == []


def test_a_study_names_each_refused_field() -> None:
    body = study("evil.io/base:1", ("ghcr.io/sarl-dev/ok:1", "evil.io/arm:1"))
    assert image_violations(body, SARL) == [
        "spec.base.resources.image='evil.io/base:1': registry not allowed "
        "(allowed: ghcr.io/sarl-dev/)",
        "spec.arms[1].override.resources.image='evil.io/arm:1': registry not allowed "
        "(allowed: ghcr.io/sarl-dev/)",
    ]
    assert image_violations(study(None, ("ghcr.io/sarl-dev/a:1",)), SARL) == []


@pytest.mark.parametrize(
    ("base", "arms"),
    [
        ("ghcr.io/sarl-dev/base:1", ()),
        ("ghcr.io/sarl-dev/base:1", ("ghcr.io/sarl-dev/low:1",)),
        (None, ("ghcr.io/sarl-dev/low:1", "ghcr.io/sarl-dev/high:1")),
        (None, ()),
    ],
)
def test_study_fields_cover_every_run(base: str | None, arms: tuple[str, ...]) -> None:
    """Every image Study.runs() gives its Experiments is one of the checked fields."""
    body = study(base, arms)
    checked = {value for _, value in image_fields(body)}
    runs = load_study(
        {k: v for k, v in body.items() if k != "metadata"} | {"metadata": {"name": "st"}}
    ).runs()
    assert {r.experiment.spec.resources.image for r in runs} - {None} <= checked


def test_hostile_study_shapes_do_not_crash() -> None:
    shapes: list[Any] = [{"arms": "x"}, {"arms": [None, 3, {"override": "x"}]}, {"base": []}, None]
    for spec in shapes:
        body = {"kind": "Study", "spec": spec}
        assert image_violations(body, SARL) == []


def test_update_refuses_only_new_violations() -> None:
    old = experiment("evil.io/x:1")  # admitted before the allow-list was set
    same = copy.deepcopy(old)
    same["metadata"]["finalizers"] = ["kopf.zalando.org/KopfFinalizerMarker"]
    assert new_image_violations(same, old, SARL) == []
    changed = copy.deepcopy(old)
    changed["spec"]["resources"]["image"] = "evil.io/y:1"
    assert new_image_violations(changed, old, SARL) == image_violations(changed, SARL)
    assert new_image_violations(experiment("evil.io/x:1"), None, SARL)  # CREATE


def test_allow_list_from_the_environment() -> None:
    env = {"SARL_ALLOWED_IMAGE_REGISTRIES": " ghcr.io/sarl-dev/ ,, quay.io/team/ "}
    assert allowed_registries(env) == ("ghcr.io/sarl-dev/", "quay.io/team/")
    assert (
        allowed_registries({}) == ()
        and allowed_registries({"SARL_ALLOWED_IMAGE_REGISTRIES": ""}) == ()
    )


@pytest.mark.parametrize(
    "entry", ["https://ghcr.io/x", "ghcr.io/x:1", "ghcr.io/x@sha256:ab", "a b"]
)
def test_an_invalid_allow_list_entry_stops_the_operator(entry: str) -> None:
    with pytest.raises(ValueError, match="SARL_ALLOWED_IMAGE_REGISTRIES") as err:
        allowed_registries({"SARL_ALLOWED_IMAGE_REGISTRIES": f"ghcr.io/sarl-dev/,{entry}"})
    assert repr(entry) in str(err.value)


def test_webhook_server_from_the_environment(tmp_path: Path) -> None:
    import kopf

    assert isinstance(webhook_server({}), IdleWebhookServer)
    env = {
        "SARL_WEBHOOK_PORT": "9443",
        "SARL_WEBHOOK_CERT_FILE": str(tmp_path / "tls.crt"),
        "SARL_WEBHOOK_KEY_FILE": str(tmp_path / "tls.key"),
    }
    server = webhook_server(env)
    assert isinstance(server, kopf.WebhookServer)
    assert (server.addr, server.port, server.certfile) == (
        "0.0.0.0",
        9443,
        env["SARL_WEBHOOK_CERT_FILE"],
    )
    for bad in ({**env, "SARL_WEBHOOK_PORT": "https"}, {"SARL_WEBHOOK_PORT": "9443"}):
        with pytest.raises(ValueError, match="SARL_WEBHOOK_PORT"):
            webhook_server(bad)


# ---- the chart's webhook objects ----


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    import yaml

    from tests.charts.rendering import PLATFORM, render_templates

    return [
        d
        for path, text in render_templates(PLATFORM, values).items()
        if not path.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if d
    ]


def _kinds(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def _operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = (
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
    )
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


WEBHOOK_OBJECTS: Final = {
    ("Service", "sarl-platform-operator-webhook"),
    ("Secret", "sarl-platform-operator-webhook-tls"),
    ("ValidatingWebhookConfiguration", "sarl-platform-operator"),
    ("Deployment", "sarl-platform-operator-webhook"),
    ("PodDisruptionBudget", "sarl-platform-operator-webhook"),
    ("ServiceAccount", "sarl-platform-operator-webhook"),
}


def _webhook_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = (
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "sarl-platform-operator-webhook"
    )
    return deployment


def test_the_webhook_survives_the_operator_and_a_drain() -> None:
    """The webhook answers for every team (failurePolicy Fail): its own Deployment of two
    replicas spread over nodes, a PodDisruptionBudget letting a drain evict one at a time, a
    rolling update that never has none ready, and the Service pointing at it, not at the
    one-replica operator (whose restart then leaves admission up)."""
    docs = _render({})
    kinds = _kinds(docs)
    assert kinds >= WEBHOOK_OBJECTS
    deployment = _webhook_deployment(docs)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    (container,) = pod["containers"]
    assert "--module=sarl_operator.admission" in container["args"]
    assert "readinessProbe" in container
    (pdb,) = (d for d in docs if d["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = spec["template"]["metadata"]["labels"]
    for selector in (pdb["spec"]["selector"]["matchLabels"], spec["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    (service,) = (
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-webhook")
    )
    assert service["spec"]["selector"].items() <= labels.items()
    operator_labels = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
    )["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= operator_labels.items()
    # One replica renders no budget (it could block every drain).
    one = _render({"operator": {"admissionWebhook": {"replicas": 1}}})
    assert not [d for d in one if d["kind"] == "PodDisruptionBudget"]


def test_the_webhook_checks_what_the_operator_checks() -> None:
    """The webhook's settings are the operator's (one helper renders both environments):
    tenant policy, image and reward allow-lists, store capacity."""
    values = {"tenants": [{"namespace": "team-a"}]}
    docs = _render(values)
    webhook = _webhook_deployment(docs)["spec"]["template"]["spec"]["containers"][0]
    hook_env = {e["name"]: e.get("value") for e in webhook["env"]}
    op_env = {e["name"]: e.get("value") for e in _operator_container(docs)["env"]}
    # The operator's own MLflow user (it tracks runs) is not a setting the webhook needs.
    own = {"SARL_OPERATOR_NAMESPACE", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"}
    shared = {k: v for k, v in op_env.items() if k not in own}
    assert shared.items() <= hook_env.items()
    assert "team-a" in hook_env["SARL_TENANTS"]


def test_the_webhook_module_reconciles_nothing() -> None:
    """Several webhook replicas may run at once only because the module they run registers
    admission handlers alone: no changing, watching, daemon or index handler."""
    import subprocess
    import sys

    probe = (
        "import kopf, sarl_operator.admission\n"
        "r = kopf.get_default_registry()\n"
        "print(len(r._webhooks.get_all_handlers()), len(r._changing.get_all_handlers()),"
        " len(r._watching.get_all_handlers()), len(r._spawning.get_all_handlers()),"
        " len(r._indexing.get_all_handlers()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert int(out[0]) >= 1 and out[1:] == ["0", "0", "0", "0"]


def test_webhook_switched_off_keeps_the_operator_check() -> None:
    docs = _render({"operator": {"admissionWebhook": {"enabled": False}}})
    assert not WEBHOOK_OBJECTS & _kinds(docs)
    container = _operator_container(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SARL_ALLOWED_IMAGE_REGISTRIES"] == "ghcr.io/sarl-dev/"
    assert not [k for k in env if k.startswith("SARL_WEBHOOK_")]
    assert [p["name"] for p in container["ports"]] == ["health"]


def test_the_operator_serves_no_webhook() -> None:
    """With the webhook on, it is served by its own replicas: the operator has no webhook
    port, certificate or server settings (its server idles)."""
    container = _operator_container(_render({}))
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert not [k for k in env if k.startswith("SARL_WEBHOOK_")]
    assert [p["name"] for p in container["ports"]] == ["health"]


def test_no_configuration_while_the_operator_is_paused() -> None:
    kinds = _kinds(_render({"operator": {"replicas": 0}}))
    assert ("ValidatingWebhookConfiguration", "sarl-platform-operator") not in kinds


def test_an_existing_certificate_secret() -> None:
    values = {
        "operator": {
            "admissionWebhook": {"tls": {"existingSecret": "hook-tls", "caBundle": "Q0E="}}
        }
    }
    docs = _render(values)
    assert not [d for d in docs if d["kind"] == "Secret"]
    (config,) = (d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    volumes = _webhook_deployment(docs)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "hook-tls"}} in volumes


def test_an_existing_certificate_with_cert_manager_injection() -> None:
    inject = {"cert-manager.io/inject-ca-from": "sarl/sarl-webhook"}
    hook = {"tls": {"existingSecret": "hook-tls"}, "annotations": inject}
    (config,) = (
        d
        for d in _render({"operator": {"admissionWebhook": hook}})
        if d["kind"] == "ValidatingWebhookConfiguration"
    )
    assert config["metadata"]["annotations"] == inject
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]


def test_an_existing_certificate_needs_its_ca() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="tls.caBundle"):
        _render({"operator": {"admissionWebhook": {"tls": {"existingSecret": "hook-tls"}}}})


def test_only_the_watched_namespaces_are_checked() -> None:
    docs = _render({"operator": {"watchNamespaces": ["team-a", "team-b"]}})
    (config,) = (d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    assert config["webhooks"][0]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
        ]
    }


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"operator": {"allowedImageRegistries": ["https://ghcr.io/x"]}}, "allowedImageRegistries"),
        ({"operator": {"allowedImageRegistries": ["ghcr.io/x:1"]}}, "allowedImageRegistries"),
        ({"operator": {"allowedImageRegistries": ["a,b"]}}, "allowedImageRegistries"),
        ({"operator": {"admissionWebhook": {"enabled": True, "port": 80}}}, "port"),
        (
            {
                "operator": {
                    "admissionWebhook": {"enabled": True, "tls": {"caBundle": "not base64!"}}
                }
            },
            "caBundle",
        ),
        ({"rbac": {"aggregateToDefaultRoles": "yes"}}, "aggregateToDefaultRoles"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], field: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=field):
        _render(values)


# ---- the webhook, served by the operator as the chart deploys it ----

ALLOWED_VALUES: Final = {"operator": {"allowedImageRegistries": ["ghcr.io/sarl-dev/"]}}


@pytest.fixture(scope="module")
def chart() -> dict[str, dict[str, Any]]:
    """The rendered webhook objects and the webhook's container (one render: genCA makes a new
    CA each time)."""
    import yaml

    from tests.charts.rendering import PLATFORM, render_templates

    docs = [
        d
        for path, text in render_templates(PLATFORM, ALLOWED_VALUES).items()
        if not path.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if d
    ]
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    deployment = by_kind[("Deployment", "sarl-platform-operator-webhook")]
    return {
        "secret": by_kind[("Secret", "sarl-platform-operator-webhook-tls")],
        "service": by_kind[("Service", "sarl-platform-operator-webhook")],
        "config": by_kind[("ValidatingWebhookConfiguration", "sarl-platform-operator")],
        "container": deployment["spec"]["template"]["spec"]["containers"][0],
    }


@dataclass(frozen=True)
class Webhook:
    """The running operator and the port its webhook server listens on."""

    operator: Any
    port: int

    def log(self) -> str:
        return str(self.operator.log())


def _wait_for_port(port: int, operator: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the webhook server never listened on {port}:\n{operator.log()}")


@pytest.fixture(scope="module")
def operator(
    chart: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    """kopf with the rendered environment; the Secret's files where the chart mounts them
    (here a temporary directory) and a free port instead of the container port."""
    pytest.importorskip("kmock")
    import os

    from tests.operators.test_rbac import ChartOperator
    from tests.support.kube_server import SARL_RESOURCES, Resource, kube_server
    from tests.support.mlflow_server import free_port

    tmp = tmp_path_factory.mktemp("webhook")
    files = {}
    for key in ("tls.crt", "tls.key"):
        files[key] = tmp / key
        files[key].write_bytes(base64.b64decode(chart["secret"]["data"][key]))
    env = {e["name"]: e["value"] for e in chart["container"]["env"] if "value" in e}
    port = free_port()
    studies = Resource("sarl.dev", "v1alpha1", "studies", "Study", subresources=("status",))
    with kube_server((*SARL_RESOURCES, studies)) as server:
        env.update(
            KUBECONFIG=str(server.kubeconfig(tmp / "kubeconfig", "team-a")),
            SARL_WEBHOOK_PORT=str(port),
            SARL_WEBHOOK_CERT_FILE=str(files["tls.crt"]),
            SARL_WEBHOOK_KEY_FILE=str(files["tls.key"]),
        )
        # As the webhook Deployment runs it: the admission module alone (ChartOperator).
        op = ChartOperator(
            env={**os.environ, **env},
            log_path=tmp / "operator.log",
            args=["--standalone", "--all-namespaces"],
        )
        op.start()
        try:
            _wait_for_port(port, op)
            yield Webhook(op, port)
        finally:
            op.stop()


def _review(
    body: dict[str, Any], operation: str, old: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An AdmissionReview v1 request as the API server sends it."""
    plural = "studies" if body["kind"] == "Study" else "experiments"
    gvr = {"group": "sarl.dev", "version": "v1alpha1", "resource": plural}
    gvk = {"group": "sarl.dev", "version": "v1alpha1", "kind": body["kind"]}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": body["metadata"]["name"],
            "namespace": body["metadata"]["namespace"],
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": body,
            "oldObject": old,
            "dryRun": False,
        },
    }


def _post(
    operator: Webhook, chart: dict[str, dict[str, Any]], review: dict[str, Any]
) -> dict[str, Any]:
    """POST as the API server would: to the configured Service path, verifying the server's
    certificate against the configuration's caBundle for ``<service>.<namespace>.svc``."""
    import httpx

    (webhook,) = chart["config"]["webhooks"]
    client_config = webhook["clientConfig"]
    service = client_config["service"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(client_config["caBundle"]).decode("ascii")
    )
    host = f"{service['name']}.{service['namespace']}.svc"
    with httpx.Client(verify=context, timeout=10) as client:
        response = client.post(
            f"https://127.0.0.1:{operator.port}{service['path']}",
            json=review,
            extensions={"sni_hostname": host},
        )
    response.raise_for_status()
    answer: dict[str, dict[str, Any]] = response.json()
    assert answer["response"]["uid"] == review["request"]["uid"]
    return answer["response"]


def test_the_certificate_is_checked(operator: Webhook, chart: dict[str, dict[str, Any]]) -> None:
    """Guard: a name the certificate does not carry fails the TLS handshake, so the other
    tests really verify the chart's certificate against its caBundle."""
    import httpx

    ca = base64.b64decode(chart["config"]["webhooks"][0]["clientConfig"]["caBundle"])
    context = ssl.create_default_context(cadata=ca.decode("ascii"))
    with httpx.Client(verify=context, timeout=10) as client, pytest.raises(httpx.ConnectError):
        client.post(
            f"https://127.0.0.1:{operator.port}/{WEBHOOK_ID}",
            json=_review(experiment(), "CREATE"),
            extensions={"sni_hostname": "sarl-platform-operator-webhook.other.svc"},
        )


def test_the_chart_points_at_the_handler(chart: dict[str, dict[str, Any]]) -> None:
    """kopf runs only the handlers whose id is the path: another path would allow everything."""
    (webhook,) = chart["config"]["webhooks"]
    assert webhook["clientConfig"]["service"]["path"] == f"/{WEBHOOK_ID}"
    assert webhook["failurePolicy"] == "Fail" and webhook["sideEffects"] == "None"
    assert webhook["rules"] == [
        {
            "apiGroups": ["sarl.dev"],
            "apiVersions": ["*"],
            "resources": ["experiments", "studies"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    env = {e["name"]: e.get("value") for e in chart["container"]["env"]}
    assert env["SARL_ALLOWED_IMAGE_REGISTRIES"] == "ghcr.io/sarl-dev/"
    ports = {p["name"]: p["containerPort"] for p in chart["container"]["ports"]}
    assert str(ports["webhook"]) == env["SARL_WEBHOOK_PORT"]
    assert chart["service"]["spec"]["ports"][0]["targetPort"] == "webhook"
    mounts = {m["mountPath"] for m in chart["container"]["volumeMounts"]}
    assert str(Path(env["SARL_WEBHOOK_CERT_FILE"] or "").parent) in mounts


def test_an_allowed_experiment_is_admitted(
    operator: Webhook, chart: dict[str, dict[str, Any]]
) -> None:
    answer = _post(operator, chart, _review(experiment("ghcr.io/sarl-dev/sarl-verl:1"), "CREATE"))
    assert answer["allowed"] is True
    assert _post(operator, chart, _review(experiment(), "CREATE"))["allowed"] is True


def test_a_foreign_image_is_refused_naming_the_field(
    operator: Webhook, chart: dict[str, dict[str, Any]]
) -> None:
    answer = _post(operator, chart, _review(experiment("evil.io/x:1"), "CREATE"))
    assert answer["allowed"] is False
    assert answer["status"] == {
        "code": 422,
        "message": "spec.resources.image='evil.io/x:1': registry not allowed "
        "(allowed: ghcr.io/sarl-dev/)",
    }


def test_a_study_arm_is_checked(operator: Webhook, chart: dict[str, dict[str, Any]]) -> None:
    answer = _post(
        operator, chart, _review(study(None, (None, "ghcr.io/sarl-dev.evil.com/x")), "CREATE")
    )
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith("spec.arms[1].override.resources.image=")
    ok = study("ghcr.io/sarl-dev/base:1", ("ghcr.io/sarl-dev/low:1",))
    assert _post(operator, chart, _review(ok, "CREATE"))["allowed"] is True


def test_updates_of_earlier_objects_pass_unless_the_image_changes(
    operator: Webhook, chart: dict[str, dict[str, Any]]
) -> None:
    old = experiment("evil.io/x:1")
    finalized = copy.deepcopy(old)
    finalized["metadata"]["finalizers"] = ["kopf.zalando.org/KopfFinalizerMarker"]
    assert _post(operator, chart, _review(finalized, "UPDATE", old))["allowed"] is True
    changed = copy.deepcopy(old)
    changed["spec"]["resources"]["image"] = "evil.io/y:1"
    assert _post(operator, chart, _review(changed, "UPDATE", old))["allowed"] is False


# ---- the resource plan (sarl_operator.admission_plan), through the same webhook ----


def paper_experiment(**algorithm: object) -> dict[str, Any]:
    """The paper's GRPO preset with ``algorithm`` fields changed, checkpointing to a store of
    its own (the chart's bundled store, 20Gi, would refuse the checkpoints)."""
    body = experiment(name="paper")
    body["spec"] = {
        "preset": "paper-grpo-math",
        "algorithm": dict(algorithm),
        "storage": {"endpoint_url": "https://s3.example.com"},
    }
    return body


def test_a_spec_that_does_not_fit_its_gpus_is_refused_with_the_numbers(
    operator: Webhook, chart: dict[str, dict[str, Any]]
) -> None:
    assert _post(operator, chart, _review(paper_experiment(), "CREATE"))["allowed"] is True
    answer = _post(operator, chart, _review(paper_experiment(max_tokens_per_gpu=None), "CREATE"))
    assert answer["allowed"] is False
    message = answer["status"]["message"]
    assert message.startswith("the resource plan does not fit")
    assert "spec.algorithm.micro_batch_size_per_gpu" in message and "has 72.0 GiB" in message
    # In the platform's bundled store (the chart tells the operator its 20Gi): refused too.
    bundled = paper_experiment()
    del bundled["spec"]["storage"]
    answer = _post(operator, chart, _review(bundled, "CREATE"))
    assert answer["allowed"] is False
    assert "spec.storage.checkpoint_uri" in answer["status"]["message"]
    assert "has 20.0 GiB" in answer["status"]["message"]


def test_plan_updates_pass_unless_the_spec_changes(
    operator: Webhook, chart: dict[str, dict[str, Any]]
) -> None:
    """kopf's finalizer patch is an UPDATE of metadata: it must pass whatever the spec says
    (an object admitted before the plan check existed could not be deleted otherwise)."""
    old = paper_experiment(max_tokens_per_gpu=None)
    finalized = copy.deepcopy(old)
    finalized["metadata"]["finalizers"] = ["kopf.zalando.org/KopfFinalizerMarker"]
    assert _post(operator, chart, _review(finalized, "UPDATE", old))["allowed"] is True
    changed = copy.deepcopy(old)
    changed["spec"]["algorithm"]["micro_batch_size_per_gpu"] = 16
    assert _post(operator, chart, _review(changed, "UPDATE", old))["allowed"] is False


def test_spec_violation_checks_the_store_and_refuses_invalid_specs() -> None:
    from sarl_operator.admission_plan import spec_violation

    paper_study = load_study(
        Path(__file__).resolve().parents[2] / "examples/studies/sarl-math.yaml"
    )
    body = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": "sarl-math", "namespace": "team-a"},
        "spec": paper_study.spec.model_dump(mode="json", exclude_unset=True),
    }
    refused = spec_violation(body, 20 * 2**30)
    assert refused is not None and "spec.base.storage.checkpoint_uri" in refused
    assert "has 20.0 GiB" in refused
    assert spec_violation(body, 8 * 2**40) is None
    broken = experiment()
    broken["spec"]["algorithm"] = {"name": "no-such-algorithm"}
    refused = spec_violation(broken, 1)  # the field the reconcile handler would report
    assert refused is not None and refused.startswith("spec.algorithm.name=")
