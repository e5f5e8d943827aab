"""Network: team-b cannot reach team-a's Ray head or served models, the platform's services accept
only their clients, and a served model answers only with the tenant's API key (issue 36 item 3).

The policies are the real ones: the platform chart rendered by Helm's engine with the tenants
team-a and team-b and the operator's builders
(:func:`sarl_operator.network_policies.network_policies`) for one Experiment per team. Whether a
connection passes is decided by :mod:`tests.support.network_policy`, an implementation of
NetworkPolicy's documented ingress semantics (no CNI runs here: the one fake, see its docstring).
The pods carry the labels the real builders give them (trainer, evaluation) and, for served
models, those KServe v0.17.0 copies from the InferenceService (``buildObjectMeta``); the
platform's pods are read from the rendered Deployments. The API-key test runs the real reward
service (``sarl serve reward``) in front of an embedding server that requires the same key.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx
import pytest
import yaml

from sarl.cluster.tenancy import Tenancy, TenantPolicy
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_experiment
from sarl_operator import child_meta, job_pods, served_models
from sarl_operator.network_policies import network_policies
from sarl_operator.platform_settings import Platform
from sarl_services.testing import start_service
from tests.charts.rendering import NAMESPACE, PLATFORM, render_templates
from tests.operators.cases import judge_doc
from tests.support.embedding_server import EmbeddingServer
from tests.support.network_policy import Pod, allowed, policies_in

TEAMS = ("team-a", "team-b")
TENANCY = Platform(tenancy=Tenancy(tenants=tuple(TenantPolicy(namespace=t) for t in TEAMS)))
#: Ray's ports on the head: GCS, client server, dashboard, and one of its workers' ports.
RAY_PORTS = (6379, 10001, 8265, 10002)
KEY = "team-a-serving-key-" + "k" * 24


def _experiment(name: str, namespace: str) -> Experiment:
    doc = judge_doc()  # an Experiment whose judge model the operator serves
    doc["metadata"]["name"] = name
    doc["spec"] = served_models.fill_judge_urls(doc["spec"], name, namespace, TENANCY)
    return load_experiment(doc)


@functools.cache
def _world() -> tuple[list[dict[str, Any]], dict[str, Pod]]:
    """(every NetworkPolicy, the pods by role) of the two-tenant platform."""
    values = {"tenants": [{"namespace": t} for t in TEAMS]}
    chart = [
        doc
        for path, text in render_templates(PLATFORM, values).items()
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    exps = {t: _experiment("grpo", t) for t in TEAMS}
    other = _experiment("other", "team-a")  # a second run of team-a
    built = [
        policy
        for ns, exp in [*exps.items(), ("team-a", other)]
        for policy in network_policies(exp, ns, TENANCY, serves_models=True)
    ]
    pods = {
        f"{ns}-trainer": Pod(f"{ns}-trainer", ns, job_pods.trainer_pod_metadata(exp)["labels"])
        for ns, exp in exps.items()
    }
    pods["team-a-other-trainer"] = Pod(
        "other", "team-a", job_pods.trainer_pod_metadata(other)["labels"]
    )
    pods["team-a-eval"] = Pod("eval", "team-a", child_meta.labels(exps["team-a"], "evaluation"))
    for ns, exp in exps.items():
        isvc = served_models.inference_services(exp, ns, TENANCY)[0]
        kserve = {"serving.kserve.io/inferenceservice": isvc["metadata"]["name"]}
        labels = {**isvc["metadata"]["labels"], **kserve, "component": "predictor"}
        pods[f"{ns}-judge"] = Pod(f"{ns}-judge", ns, labels, {"http": 8080})
    # Someone in a namespace that is no tenant, even dressed as a sarl trainer.
    pods["intruder"] = Pod(
        "x", "elsewhere", job_pods.trainer_pod_metadata(exps["team-b"])["labels"]
    )
    pods["team-b-notebook"] = Pod("nb", "team-b", {"app": "jupyter"})
    for deployment in (o for o in chart if o["kind"] == "Deployment"):
        template = deployment["spec"]["template"]
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        ports = {
            p["name"]: p["containerPort"]
            for c in template["spec"]["containers"]
            for p in c.get("ports", [])
        }
        pods[component] = Pod(component, NAMESPACE, template["metadata"]["labels"], ports)
    return [*policies_in(chart, NAMESPACE), *built], pods


def _can(source: str, dest: str, port: int) -> bool:
    policies, pods = _world()
    return allowed(policies, pods[source], pods[dest], port)


@pytest.mark.parametrize("source", ["team-b-trainer", "team-b-notebook", "team-a-other-trainer"])
@pytest.mark.parametrize("port", RAY_PORTS)
def test_another_pod_cannot_reach_team_a_ray_head(source: str, port: int) -> None:
    """Attack: team-b's trainer or notebook (or team-a's other run) connects to team-a's Ray
    head (6379/10001/8265, a worker port) to run code in its trainer. Must happen: dropped by
    the Experiment's <name>-trainer policy; team-a's own nodes keep reaching each other."""
    assert not _can(source, "team-a-trainer", port)
    assert _can("team-a-trainer", "team-a-trainer", port)  # its other nodes (same labels)


def test_team_b_cannot_call_team_a_served_judge() -> None:
    """Attack: team-b's trainer calls team-a's served judge model. Must happen: dropped by
    <name>-served; team-a's trainer and evaluation pods reach it."""
    assert not _can("team-b-trainer", "team-a-judge", 8080)
    assert not _can("team-a-other-trainer", "team-a-judge", 8080)
    assert _can("team-a-trainer", "team-a-judge", 8080)
    assert _can("team-a-eval", "team-a-judge", 8080)


@pytest.mark.parametrize("team", TEAMS)
def test_mlflow_and_the_store_accept_the_tenants_job_pods(team: str) -> None:
    """MLflow and the object store serve each tenant's job pods (its MLflow user and store key
    then limit what they may do) and the platform's own pods."""
    _, pods = _world()
    assert _can(f"{team}-trainer", "mlflow", pods["mlflow"].ports["http"])
    assert _can(f"{team}-trainer", "minio", pods["minio"].ports["s3"])
    assert _can(f"{team}-judge", "minio", pods["minio"].ports["s3"])  # storage initializer
    assert _can("operator", "mlflow", pods["mlflow"].ports["http"])
    assert _can("mlflow", "minio", pods["minio"].ports["s3"])


def test_a_pod_of_an_unlisted_namespace_reaches_no_platform_service() -> None:
    """Attack: a pod in a namespace that is no tenant (labelled as a sarl trainer) talks to
    the platform's MLflow and object store. Must happen: dropped; nor may a tenant's notebook
    or any pod open the store's console or the operator."""
    _, pods = _world()
    assert not _can("intruder", "mlflow", pods["mlflow"].ports["http"])
    assert not _can("intruder", "minio", pods["minio"].ports["s3"])
    assert not _can("team-b-notebook", "minio", pods["minio"].ports["s3"])
    assert not _can("team-a-trainer", "minio", pods["minio"].ports["console"])
    assert not _can("team-a-trainer", "operator", pods["operator"].ports["health"])


def test_the_webhook_port_accepts_the_api_server_from_anywhere() -> None:
    """The API server's address cannot be selected: the webhook's port is open, only it."""
    _, pods = _world()
    assert _can("intruder", "webhook", pods["webhook"].ports["webhook"])
    assert not _can("intruder", "webhook", pods["webhook"].ports["health"])


@pytest.fixture(scope="module")
def keyed_reward() -> Any:
    """team-a's reward service with its serving key, calling an embedding model that requires
    the same key (as a tenant's served models do)."""
    embedder = EmbeddingServer(api_key=KEY).start()
    service = start_service(
        "reward",
        ["--embedder", "openai", "--embedding-url", embedder.url, "--embedding-model", "fake",
         "--embedding-max-retries", "0"],
        env={"SARL_SERVING_API_KEY": KEY},
    )  # fmt: skip
    try:
        service.wait_until_ready()
        yield service
    finally:
        service.stop()
        embedder.stop()


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer team-b-key"}, {"Authorization": KEY}],
    ids=["no-key", "wrong-key", "not-bearer"],
)
def test_a_served_model_refuses_a_caller_without_the_tenants_key(
    keyed_reward: Any, headers: dict[str, str]
) -> None:
    """Attack: team-b calls team-a's reward service without team-a's key (none, its own, or
    the key without the Bearer scheme). Must happen: 401 with a JSON error that names the
    header to send and echoes no key; nothing is scored."""
    url = f"{keyed_reward.url}/v1/rewards/structure"
    response = httpx.post(url, json={"requests": [{"response": "a. b."}]}, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    error = response.json()["error"]
    assert "Authorization: Bearer" in error["message"]
    assert KEY not in response.text and "team-b-key" not in response.text


def test_the_tenants_key_is_served_and_forwarded_to_its_models(keyed_reward: Any) -> None:
    """team-a's own caller with the key is served (200), the service's own call to the keyed
    embedding model carries it too, and the probes stay open without a key."""
    url = f"{keyed_reward.url}/v1/rewards/structure"
    body = {"requests": [{"response": "First, add 2 and 3. Then double it. So 10."}]}
    response = httpx.post(url, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert response.status_code == 200, response.text
    assert "score" in response.json()["results"][0]
    assert keyed_reward.status(f"/v1/models/{keyed_reward.name}") == 200
    assert keyed_reward.status("/v2/health/live") == 200
