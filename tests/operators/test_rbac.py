"""The operator's RBAC rules are exactly its API calls: none missing, none unused.

The operator runs as the chart deploys it (``kopf run`` with the rendered Deployment's arguments and
environment) against the in-memory Kubernetes API server (:mod:`tests.support.kube_server`, kmock's
emulation: no real cluster can run here, and it has no RBAC, admission or controllers) and a real
MLflow server, through an Experiment's and a Study's whole life: children created, then patched
after a spec update, the evaluation Job, the Study's runs and report Job, and an Experiment run as a
Kubeflow Trainer v2 TrainJob (the cluster serves both job kinds, so the others ask for PyTorchJob).
The test plays the Training Operator and KServe (statuses) with its own User-Agent; every other
request is the operator's. Each call (plus the ``blockOwnerDeletion`` check the API server makes on
children, see :func:`tests.rbac.implied_calls`) must be allowed by the rendered roles bound to the
operator's ServiceAccount, and every rendered rule must be used by some call, for the cluster-wide
and the namespaced install. A handler making a new call, or a rule added "just in case", fails here.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pytest

pytest.importorskip("kmock")
from kubernetes import config, dynamic

from tests.charts.rendering import NAMESPACE, PLATFORM, Case, objects, objects_of_kind
from tests.operators.operator_process import Operator, wait_for
from tests.operators.study_cases import small_doc
from tests.operators.test_operator import _doc as experiment_doc
from tests.rbac import (
    Call,
    Recorded,
    denied,
    implied_calls,
    recorded,
    subject_grants,
    unused,
)
from tests.support.kube_server import (
    CLUSTER_TRAINING_RUNTIMES,
    EXPERIMENTS,
    ISVCS,
    JOBS,
    NAMESPACES,
    PYTORCHJOBS,
    SARL_RESOURCES,
    SECRETS,
    TRAINER_V2_RESOURCES,
    TRAINJOBS,
    KubeServer,
    Resource,
    kube_server,
)

STUDIES: Final = Resource("sarl.dev", "v1alpha1", "studies", "Study", subresources=("status",))
RESOURCES: Final = (*SARL_RESOURCES, *TRAINER_V2_RESOURCES, STUDIES)
PLURALS: Final = {(r.group, r.kind): r.plural for r in RESOURCES}
#: Watched in both cases (ci/namespaced-values.yaml lists team-a and team-b; cluster-wide: all).
TEAM: Final = "team-a"
TEST_AGENT: Final = "sarl-rbac-test"  # the test's own requests (Training Operator, KServe, user)
SUCCEEDED: Final = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}


@dataclass
class ChartOperator(Operator):
    """The operator with the rendered Deployment's ``kopf run`` arguments."""

    args: list[str] = field(default_factory=list)

    def start(self) -> None:
        # sarl_operator.admission registers the webhook handlers kopf serves (idle here: no
        # certificate); named explicitly in case the handlers module does not import it.
        command = [sys.executable, "-m", "kopf", "run", *self.args]
        command.append("--module=sarl_operator.admission")
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )


def _container(case: Case) -> dict[str, Any]:
    (deployment,) = (
        d
        for d in objects_of_kind(case, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    )
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _operator_env(case: Case, overrides: dict[str, str]) -> dict[str, str]:
    """The rendered environment (plain values; the namespace from the downward API), without
    the webhook server's (its certificate is not mounted here: the server idles)."""
    env = {e["name"]: e["value"] for e in _container(case)["env"] if "value" in e}
    env = {k: v for k, v in env.items() if not k.startswith("SARL_WEBHOOK_")}
    return {**os.environ, **env, "SARL_OPERATOR_NAMESPACE": NAMESPACE, **overrides}


@pytest.fixture(scope="module", params=["cluster-wide", "namespaced"])
def case(request: pytest.FixtureRequest) -> Case:
    return Case(PLATFORM, request.param)


@pytest.fixture(scope="module")
def namespaces_path_fix() -> Iterator[None]:
    """kmock 0.8 fails (HTTP 500) on ``/api/v1/namespaces`` itself: its path parser takes
    ``namespaces`` for the namespace prefix of a namespaced URL. kopf lists and watches that
    URL when it watches given namespaces, so the cluster-scoped ``namespaces`` resource is
    parsed here first (in this process, where the server runs)."""
    from kmock._internal import parsing

    original = parsing.parse_path

    def parse_path(path: str) -> Any:
        parts = [p for p in path.split("/") if p]
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
            name = parts[3] if len(parts) == 4 else None
            return parsing.ParsedPath("", "v1", "namespaces", None, name, None)
        return original(path)

    parsing.parse_path = parse_path
    yield
    parsing.parse_path = original


@pytest.fixture(scope="module")
def server(case: Case, namespaces_path_fix: None) -> Iterator[KubeServer]:
    with kube_server(RESOURCES) as ks:
        yield ks


@pytest.fixture(scope="module")
def kube(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> dynamic.DynamicClient:
    path = server.kubeconfig(tmp_path_factory.mktemp("rbac-client") / "kubeconfig", TEAM)
    api = config.new_client_from_config(config_file=str(path))
    api.user_agent = TEST_AGENT
    return dynamic.DynamicClient(api)


@pytest.fixture(scope="module")
def operator(
    case: Case, server: KubeServer, mlflow_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartOperator]:
    tmp = tmp_path_factory.mktemp(f"rbac-operator-{case.values}")
    env = _operator_env(
        case,
        {
            "KUBECONFIG": str(server.kubeconfig(tmp / "kubeconfig", TEAM)),
            "SARL_MLFLOW_TRACKING_URI": mlflow_server.url,
            "SARL_STATUS_INTERVAL_S": "1",
            "SARL_RETRY_DELAY_S": "1",
            # The chart's bundled store is a trial store (20Gi): the paper-sized Experiment
            # these calls come from would be refused as not fitting it. RBAC is the point here.
            "SARL_STORE_CAPACITY": "10Ti",
        },
    )
    # --liveness would bind port 8080; it makes no API call.
    args = [a for a in _container(case)["args"] if not a.startswith("--liveness")]
    op = ChartOperator(env=env, log_path=tmp / "operator.log", args=args)
    op.start()
    yield op
    op.stop()


def _credentials(case: Case) -> dict[str, Any]:
    """The S3 credentials Secret the chart names, in the Experiments' namespace."""
    env = _operator_env(case, {})
    keys = (env["SARL_S3_ACCESS_KEY_ID_KEY"], env["SARL_S3_SECRET_ACCESS_KEY_KEY"])
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": env["SARL_S3_CREDENTIALS_SECRET"], "namespace": TEAM},
        "data": {k: "eA==" for k in keys},
    }


def _play_kserve(server: KubeServer, stop: threading.Event) -> None:
    """KServe's part: every InferenceService reports Ready (stored directly, no request)."""
    while not stop.wait(0.2):
        for isvc in server.objects(ISVCS, TEAM).values():
            if not (isvc.get("status") or {}).get("conditions"):
                ready = {"conditions": [{"type": "Ready", "status": "True"}]}
                server.put(ISVCS, TEAM, {**isvc, "status": ready})


def _merge(kube: dynamic.DynamicClient, api_version: str, kind: str, name: str, body: Any) -> None:
    kube.resources.get(api_version=api_version, kind=kind).patch(
        body=body, name=name, namespace=TEAM, content_type="application/merge-patch+json"
    )


def _create(kube: dynamic.DynamicClient, kind: str, doc: dict[str, Any]) -> None:
    kube.resources.get(api_version="sarl.dev/v1alpha1", kind=kind).create(body=doc, namespace=TEAM)


def _experiment_life(server: KubeServer, kube: dynamic.DynamicClient) -> None:
    """Create (ConfigMap, InferenceService, PyTorchJob in a Kueue queue: its Workloads listed),
    update the spec (all three patched), training Succeeded (evaluation Job), evaluation
    Complete (InferenceService deleted)."""
    doc = experiment_doc("rbac-exp")
    doc["spec"].setdefault("resources", {})["job_kind"] = "PyTorchJob"
    # A Kueue queue: the operator lists the job's Workload (there is none: no Kueue runs here).
    doc["spec"]["resources"]["queue"] = "team-a-gpu"
    _create(kube, "Experiment", doc)
    wait_for("the PyTorchJob", lambda: server.objects(PYTORCHJOBS, TEAM).get("rbac-exp"))
    _merge(
        kube, "sarl.dev/v1alpha1", "Experiment", "rbac-exp", {"spec": {"resources": {"nodes": 2}}}
    )
    wait_for(
        "the patched PyTorchJob",
        lambda: (
            "Worker" in server.objects(PYTORCHJOBS, TEAM)["rbac-exp"]["spec"]["pytorchReplicaSpecs"]
        ),
    )
    _merge(kube, "kubeflow.org/v1", "PyTorchJob", "rbac-exp", SUCCEEDED)
    wait_for("the evaluation Job", lambda: server.objects(JOBS, TEAM).get("rbac-exp-eval"))
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    _merge(kube, "batch/v1", "Job", "rbac-exp-eval", complete)
    wait_for(
        "the released InferenceService",
        lambda: "rbac-exp-embedding" not in server.objects(ISVCS, TEAM),
    )


def _trainjob_life(server: KubeServer, kube: dynamic.DynamicClient) -> None:
    """With the chart's ClusterTrainingRuntime (checked by name), create the TrainJob, then
    patch it (its metadata) after a spec update."""
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "sarl-torch-distributed"},
    }
    server.put(CLUSTER_TRAINING_RUNTIMES, None, runtime)
    doc = experiment_doc("rbac-tj")
    doc["spec"].setdefault("resources", {})["job_kind"] = "TrainJob"
    _create(kube, "Experiment", doc)
    wait_for("the TrainJob", lambda: server.objects(TRAINJOBS, TEAM).get("rbac-tj"))
    version = server.objects(TRAINJOBS, TEAM)["rbac-tj"]["metadata"]["resourceVersion"]
    _merge(kube, "sarl.dev/v1alpha1", "Experiment", "rbac-tj", {"spec": {"algorithm": {"seed": 7}}})
    wait_for(
        "the patched TrainJob",
        lambda: (
            server.objects(TRAINJOBS, TEAM)["rbac-tj"]["metadata"]["resourceVersion"] != version
        ),
    )


def _exists(server: KubeServer, resource: Resource, name: str) -> bool:
    return name in server.objects(resource, TEAM)


def _study_life(server: KubeServer, kube: dynamic.DynamicClient) -> None:
    """Create a 2-run Study (ConfigMap, its Experiments and their children), finish the runs
    (the report Job)."""
    doc = small_doc("rbac-st", seeds=1)
    doc["spec"]["base"]["resources"]["job_kind"] = "PyTorchJob"
    _create(kube, "Study", doc)
    runs = ("rbac-st-low-s0", "rbac-st-high-s0")
    for run in runs:
        wait_for(f"PyTorchJob {run}", functools.partial(_exists, server, PYTORCHJOBS, run))
        _merge(kube, "kubeflow.org/v1", "PyTorchJob", run, SUCCEEDED)
    wait_for("the report Job", lambda: server.objects(JOBS, TEAM).get("rbac-st-report"), 90.0)
    assert {r for r in runs if r in server.objects(EXPERIMENTS, TEAM)} == set(runs)


@pytest.fixture(scope="module")
def operator_calls(
    case: Case, operator: ChartOperator, server: KubeServer, kube: dynamic.DynamicClient
) -> list[Call]:
    """The operator's calls over both lives, with the checks implied by their bodies."""
    for name in ("team-a", "team-b"):  # kopf serves only watched namespaces that exist
        server.put(
            NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    server.put(SECRETS, TEAM, _credentials(case))
    stop = threading.Event()
    kserve = threading.Thread(target=_play_kserve, args=(server, stop), daemon=True)
    kserve.start()
    try:
        _experiment_life(server, kube)
        _trainjob_life(server, kube)
        _study_life(server, kube)
    finally:
        stop.set()
        kserve.join(5)
        operator.stop()  # no request after this: the record is complete
    ours: list[Recorded] = [r for r in recorded(server) if r.user_agent != TEST_AGENT]
    implied = [c for r in ours for c in implied_calls(r, PLURALS)]
    return [r.call for r in ours] + implied


def _grants(case: Case) -> Any:
    return subject_grants(objects(case), "ServiceAccount", "sarl-platform-operator", NAMESPACE)


def test_every_call_is_granted(case: Case, operator_calls: list[Call]) -> None:
    assert operator_calls, "the operator made no request"
    assert denied(_grants(case), operator_calls) == [], "calls without a rule"


def test_every_rule_is_used(case: Case, operator_calls: list[Call]) -> None:
    """Per rule, resource and verb (the namespaced Roles are the same rules in each watched
    namespace: a use in one counts)."""
    anywhere = [dataclasses.replace(c, namespace=None) for c in operator_calls]
    unscoped = [dataclasses.replace(g, namespace=None) for g in _grants(case)]
    assert unused(unscoped, anywhere) == [], "rules no call needs"
