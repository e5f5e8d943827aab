"""An admitted PyTorchJob keeps what Kueue merged into its pods when the operator applies the
Experiment again (a spec update, or the operator's restart resuming every Experiment); an
admitted TrainJob whose pods lost the spec's tolerations to the flavor's says so.

Kueue v0.19.2 merges the assigned ResourceFlavor's node labels and tolerations into every pod
template when it admits a job (``pkg/podset/podset.go`` ``Merge``); the operator's merge patch
of an existing job replaced the template's ``tolerations`` list with the spec's, so a pod
recreated after a node loss no longer tolerated the taints of the flavor's nodes. A TrainJob
has the mirror problem: Kueue's runtimePatches entry, applied after the operator's, replaces
the spec's tolerations with the flavor's. Kueue cannot run here:
:mod:`tests.operators.kueue_admission` emulates its writes and how Kubeflow Trainer v2.3.0
applies a TrainJob's runtimePatches, naming the upstream files; the API server is kmock's
emulator (:mod:`tests.support.kube_server`), whose merge patch follows RFC 7386 as the API
server's does (maps merged, lists replaced). The handlers and the kubernetes client are real.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import kopf
import pytest

pytest.importorskip("kmock")

from sarl_operator import experiment_handlers, scheduling, trainjob
from sarl_operator.experiment_conditions import admission_condition
from sarl_operator.kube import DynamicKubeApi
from tests.operators.cases import IMAGE, NAMESPACE, PLATFORM, RUN_ID, TRACKING_URI, two_node_doc
from tests.operators.kueue_admission import (
    PODSET_LABEL,
    Flavor,
    admission_patch,
    suspension_patch,
    trainer_pod_tolerations,
    trainjob_admitted,
    trainjob_created,
)
from tests.operators.test_handlers import SETTINGS, FakeApi, FakeTracker
from tests.support.kube_server import ISVCS, PYTORCHJOBS, SECRETS, KubeServer, kube_server

NAME: Final = "sarl-grpo-math-2node"
#: The spec's own (two_node_doc) and the flavor's: a GPU pool tainted for one team.
SPEC_TOLERATION: Final = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
FLAVOR: Final = Flavor(
    node_labels={"cloud.example.com/pool": "h100-reserved"},
    tolerations=[
        {"key": "reserved-for", "operator": "Equal", "value": "team-a", "effect": "NoSchedule"}
    ],
)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with kube_server() as ks:
        ks.put(SECRETS, NAMESPACE, {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": PLATFORM.s3_credentials_secret, "namespace": NAMESPACE},
            "data": {"AWS_ACCESS_KEY_ID": "a2V5", "AWS_SECRET_ACCESS_KEY": "c2VjcmV0"},
        })  # fmt: skip
        yield ks


@pytest.fixture
def api(server: KubeServer, tmp_path: Path) -> DynamicKubeApi:
    path = server.kubeconfig(tmp_path / "kubeconfig", NAMESPACE)
    return DynamicKubeApi(timeout_s=10, kubeconfig=str(path))


def _body() -> dict[str, Any]:
    doc = two_node_doc()
    doc["spec"]["resources"]["queue"] = "team-a"
    return {
        "apiVersion": doc["apiVersion"],
        "kind": doc["kind"],
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "uid-1", "generation": 1},
        "spec": doc["spec"],
    }


def _reconcile(body: dict[str, Any], api: DynamicKubeApi) -> None:
    patch: dict[str, Any] = {}
    experiment_handlers.reconcile(
        body, patch, api, settings=SETTINGS, post_event=lambda *_: None,
        tracker_factory=lambda _uri: FakeTracker(),
    )  # fmt: skip
    body["status"] = {**(body.get("status") or {}), **patch.get("status", {})}


def _job(server: KubeServer) -> dict[str, Any]:
    return server.objects(PYTORCHJOBS, NAMESPACE)[NAME]


def _started(server: KubeServer, api: DynamicKubeApi) -> dict[str, Any]:
    """Reconcile until the PyTorchJob exists (the served embedder reported Ready in between,
    as KServe would): the Experiment's body, the job created suspended in its queue."""
    body = _body()
    with pytest.raises(kopf.TemporaryError, match="InferenceService"):
        _reconcile(body, api)
    for isvc in server.objects(ISVCS, NAMESPACE).values():
        isvc["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        server.put(ISVCS, NAMESPACE, isvc)
    _reconcile(body, api)
    assert scheduling.waiting_for_admission(_job(server))
    return body


def _pods(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: r["template"] for n, r in job["spec"]["pytorchReplicaSpecs"].items()}


def test_a_reapplied_admitted_pytorchjob_keeps_the_flavors_tolerations(
    server: KubeServer, api: DynamicKubeApi
) -> None:
    body = _started(server, api)
    api.patch(admission_patch(_job(server), FLAVOR))
    admitted = _job(server)
    assert not scheduling.is_suspended(admitted)

    _reconcile(body, api)  # the operator's restart resumes every Experiment; an update too

    after = _job(server)
    assert not scheduling.is_suspended(after)  # Kueue's to flip, never the operator's
    for replica, template in _pods(after).items():
        pod = template["spec"]
        assert pod["tolerations"] == [SPEC_TOLERATION, *FLAVOR.tolerations], replica
        assert pod["nodeSelector"] == {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            **FLAVOR.node_labels,
        }
        assert template["metadata"]["labels"][PODSET_LABEL] == replica.lower()
    assert _pods(after) == _pods(admitted)  # nothing Kueue wrote was lost


def test_a_suspended_pytorchjob_is_patched_as_the_spec_says(
    server: KubeServer, api: DynamicKubeApi
) -> None:
    """Evicted: Kueue suspended the job and restored its templates (``RestorePodSpec``); the
    spec's tolerations are then the whole list again."""
    body = _started(server, api)
    recorded = copy.deepcopy(_job(server))
    api.patch(admission_patch(_job(server), FLAVOR))
    api.patch(suspension_patch(_job(server), recorded))
    other = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    body["spec"]["resources"]["tolerations"] = [other]
    _reconcile(body, api)
    for template in _pods(_job(server)).values():
        assert template["spec"]["tolerations"] == [other]


def _pytorchjob(tolerations: list[dict[str, Any]] | None, suspend: bool) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": "pytorch"}]}
    if tolerations is not None:
        pod["tolerations"] = tolerations
    replica = {"replicas": 1, "template": {"spec": pod}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {"Master": replica}},
    }


LIVE: Final = [SPEC_TOLERATION, *FLAVOR.tolerations]
SAME_AS_SPEC: Final = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("desired", "current", "expected"),
    [
        ([SPEC_TOLERATION], None, [SPEC_TOLERATION]),  # created: as built
        ([SPEC_TOLERATION], (LIVE, True), [SPEC_TOLERATION]),  # suspended: Kueue restored it
        ([SPEC_TOLERATION], (LIVE, False), LIVE),  # running: Kueue's kept, once
        ([SAME_AS_SPEC], (LIVE, False), LIVE),
        ([], (LIVE, False), LIVE),  # the spec dropped its own: kept until the next run
        (None, (LIVE, False), None),  # not in the patch: the live list stays untouched
    ],
)
def test_keep_admission(
    desired: list[dict[str, Any]] | None,
    current: tuple[list[dict[str, Any]], bool] | None,
    expected: list[dict[str, Any]] | None,
) -> None:
    live = None if current is None else _pytorchjob(*current)
    out = scheduling.keep_admission(_pytorchjob(desired, False), live)
    pod = out["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod.get("tolerations") == expected


def test_keep_admission_leaves_a_trainjob_patch_alone() -> None:
    """A TrainJob's patch is its metadata (``trainjob.existing_patch``): nothing to keep."""
    patch = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
             "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"a": "b"}}}  # fmt: skip
    live = {**patch, "spec": {"suspend": False}}
    assert scheduling.keep_admission(patch, live) == patch


# ---- TrainJob: Kueue's entry replaces the spec's tolerations; the operator says so ----


def _admitted_trainjob(flavor: Flavor) -> dict[str, Any]:
    """The 2-node case's TrainJob in queue team-a, as stored once Kueue admitted it."""
    exp = experiment_handlers.experiment_from_body(_body(), PLATFORM)
    built = trainjob.trainjob(
        exp, NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI,
        platform=PLATFORM,
    )  # fmt: skip
    built["metadata"]["uid"] = "job-uid"
    return trainjob_admitted(trainjob_created(built), flavor, trainjob.NODE)


def _admitted_workload() -> dict[str, Any]:
    conds = [{"type": t, "status": "True"} for t in ("QuotaReserved", "Admitted")]
    return {
        "apiVersion": scheduling.WORKLOAD_API_VERSION, "kind": "Workload",
        "metadata": {"name": "trainjob-x-1a2b3", "namespace": NAMESPACE,
                     "labels": {scheduling.JOB_UID_LABEL: "job-uid"},
                     "ownerReferences": [{"controller": True, "uid": "job-uid"}]},
        "status": {"conditions": conds, "admission": {"clusterQueue": "gpus"}},
    }  # fmt: skip


def _admitted_condition(job: dict[str, Any]) -> dict[str, Any]:
    api = FakeApi(trainer_v2=True)
    wl = _admitted_workload()
    api.objects[(wl["apiVersion"], "Workload", NAMESPACE, wl["metadata"]["name"])] = wl
    cond = admission_condition(api, job)
    assert cond is not None and cond["status"] == "True"
    return cond


def test_an_admitted_trainjob_says_the_flavor_replaced_the_spec_tolerations() -> None:
    job = _admitted_trainjob(FLAVOR)
    # What the pods get (emulated Trainer v2.3.0): the flavor's list alone.
    assert trainer_pod_tolerations(job, trainjob.NODE) == FLAVOR.tolerations
    assert trainjob.replaced_tolerations(job) == [SPEC_TOLERATION]
    message = _admitted_condition(job)["message"]
    assert "replaced spec.resources.tolerations (nvidia.com/gpu)" in message
    assert "add them to the ResourceFlavor's spec.tolerations" in message
    assert "job_kind: PyTorchJob" in message


@pytest.mark.parametrize(
    "flavor",
    [
        Flavor(node_labels=FLAVOR.node_labels),  # no tolerations: the spec's stay
        Flavor(tolerations=[SPEC_TOLERATION, *FLAVOR.tolerations]),  # the flavor has the spec's
    ],
)
def test_an_admitted_trainjob_whose_pods_keep_the_spec_tolerations_says_nothing(
    flavor: Flavor,
) -> None:
    job = _admitted_trainjob(flavor)
    assert SPEC_TOLERATION in trainer_pod_tolerations(job, trainjob.NODE)
    assert trainjob.replaced_tolerations(job) == []
    assert "tolerations" not in _admitted_condition(job)["message"]
