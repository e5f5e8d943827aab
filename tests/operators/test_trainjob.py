"""The Kubeflow Trainer v2 TrainJob builder (:mod:`sarl_operator.trainjob`), the sarl-platform
chart's ClusterTrainingRuntime it references, the job kind the handlers choose and the phase
read from a TrainJob's status.

Emulated upstream behaviour is that of Kubeflow Trainer v2.3.0 (commit 658725bd); each test
names the upstream file it follows. The upstream CRDs are vendored, unmodified, in
``fixtures/upstream/trainer-v2.3.0`` (SOURCE.md); objects are validated against their
``openAPIV3Schema`` with unknown fields refused (the API server would prune them silently).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any, Final

import kopf
import pytest
import yaml

from sarl_operator import builders, experiment_handlers, job_pods, status, trainjob
from sarl_operator.platform_settings import Platform
from tests.charts.rendering import API_SETS, render_templates
from tests.charts.rendering import PLATFORM as PLATFORM_CHART
from tests.charts.test_crd import _as_json_schema
from tests.operators.cases import (
    IMAGE,
    NAMESPACE,
    PLATFORM,
    RUN_ID,
    TRACKING_URI,
    example_doc,
    experiment_of,
    two_node_doc,
)
from tests.operators.test_handlers import SETTINGS, FakeApi, FakeTracker
from tests.operators.test_handlers import _body as handler_body
from tests.operators.test_handlers import _reconcile as handler_reconcile
from tests.operators.upstream_crds import strict

CRDS: Final = Path(__file__).resolve().parent / "fixtures" / "upstream" / "trainer-v2.3.0"
LAYOUTS: Final = [(1, 8), (2, 8), (4, 1)]
BACKENDS: Final = ["verl", "trl"]
TRAINJOB_KEY: Final = ("trainer.kubeflow.org/v1alpha1", "TrainJob", NAMESPACE)


@functools.cache
def _validator(plural: str) -> Any:
    import jsonschema

    doc = yaml.safe_load((CRDS / f"trainer.kubeflow.org_{plural}.yaml").read_text())
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1alpha1"]
    return jsonschema.Draft4Validator(_as_json_schema(strict(version["schema"]["openAPIV3Schema"])))


def _errors(plural: str, obj: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in _validator(plural).iter_errors(obj)
    ]


def _experiment(backend: str, nodes: int, gpus: int, **resources: Any) -> Any:
    doc = example_doc()
    doc["spec"]["resources"] = {
        "backend": backend,
        "nodes": nodes,
        "gpus_per_node": gpus,
        **resources,
    }
    return experiment_of(doc)


def _build(exp: Any, platform: Platform = PLATFORM) -> dict[str, Any]:
    return trainjob.trainjob(
        exp,
        NAMESPACE,
        image=IMAGE,
        mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI,
        platform=platform,
    )


def _pytorchjob(exp: Any) -> dict[str, Any]:
    return builders.pytorchjob(
        exp,
        NAMESPACE,
        image=IMAGE,
        mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI,
        platform=PLATFORM,
    )


def _node_patch(job: dict[str, Any]) -> dict[str, Any]:
    """The pod template of the ``node`` replicated job in the operator's runtime patch."""
    (patch,) = job["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == trainjob.NODE
    template: dict[str, Any] = rjob["template"]["spec"]["template"]
    return template


def _runtime(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's runtime as rendered for a cluster that serves it (`--api-versions`)."""
    rendered = render_templates(PLATFORM_CHART, values, API_SETS["trainer-v2"])
    (text,) = [t for path, t in rendered.items() if path.endswith("trainingruntime.yaml")]
    obj: dict[str, Any] = yaml.safe_load(text)
    return obj


# ---- the TrainJob ----


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("nodes", "gpus"), LAYOUTS)
def test_trainjob_validates_against_the_upstream_crd(backend: str, nodes: int, gpus: int) -> None:
    job = _build(_experiment(backend, nodes, gpus))
    assert _errors("trainjobs", job) == []
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (nodes, gpus)
    assert trainer["command"] == ["python", "-m", job_pods.TRAINER_MODULES[backend]]


def test_trainjob_with_every_pod_setting_validates() -> None:
    """Node selector, tolerations, service account, pull secrets, a scratch claim (POD_NAME
    from the downward API) and a Kueue queue, all in fields of the v2.3.0 CRD."""
    exp = _experiment(
        "verl",
        2,
        8,
        node_selector={"nvidia.com/gpu.product": "H100"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        service_account="trainer",
        image_pull_secrets=["registry"],
        scratch_claim="scratch-pvc",
        queue="team-a",
    )
    job = _build(exp)
    assert _errors("trainjobs", job) == []
    pod = _node_patch(job)["spec"]
    assert pod["serviceAccountName"] == "trainer"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in (
        job["spec"]["trainer"]["env"]
    )


def test_an_unknown_field_fails_validation() -> None:
    """Guard: v2.0's ``podTemplateOverrides`` is no field of v2.3.0's TrainJob."""
    job = _build(_experiment("verl", 1, 8))
    job["spec"]["podTemplateOverrides"] = []
    assert any("podTemplateOverrides" in e for e in _errors("trainjobs", job))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("nodes", "gpus"), LAYOUTS)
def test_trainjob_runs_the_pytorchjob_pod(backend: str, nodes: int, gpus: int) -> None:
    """The same container (image, command, args, env, resources) and pod (volumes, mounts,
    labels, annotations) as the PyTorchJob's Master, split over spec.trainer and the patch."""
    exp = _experiment(backend, nodes, gpus)
    job = _build(exp)
    master = _pytorchjob(exp)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    container = master["spec"]["containers"][0]
    trainer = job["spec"]["trainer"]
    for key in ("image", "command", "args", "env"):
        assert trainer[key] == container[key], key
    assert trainer["resourcesPerNode"] == container["resources"]
    node = _node_patch(job)
    assert node["metadata"] == master["metadata"]
    assert node["spec"]["volumes"] == master["spec"]["volumes"]
    assert node["spec"]["securityContext"] == master["spec"]["securityContext"]
    assert node["spec"]["containers"] == [
        {
            "name": trainjob.NODE,
            "volumeMounts": container["volumeMounts"],
            "securityContext": container["securityContext"],
        }
    ]
    assert job["metadata"]["name"] == exp.name
    assert job["spec"]["runtimeRef"] == {
        "name": trainjob.RUNTIME_NAME,
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }


def test_torch_plugin_variables_are_left_to_the_trainer() -> None:
    """v2.3.0 pkg/runtime/framework/plugins/torch/torch.go (EnforceMLPolicy) sets PET_NNODES,
    PET_NPROC_PER_NODE, PET_NODE_RANK (job completion index), PET_MASTER_ADDR
    (``<job>-node-0-0.<job>``) and PET_MASTER_PORT (29500) on the container named ``node``;
    its Validate refuses them in spec.trainer.env (pkg/constants/constants.go,
    TorchRunReservedEnvNames), and the jobset plugin's Validate refuses any env on the ``node``
    container of a runtime patch (plugins/jobset/jobset.go)."""
    assert trainjob.NODE == "node"
    assert {
        "PET_NNODES",
        "PET_NPROC_PER_NODE",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
    } == trainjob.TORCH_RESERVED_ENV
    for nodes, gpus in LAYOUTS:
        job = _build(_experiment("verl", nodes, gpus, scratch_claim="c"))
        names = {e["name"] for e in job["spec"]["trainer"]["env"]}
        assert not names & trainjob.TORCH_RESERVED_ENV
        assert not {n for n in names if n.startswith("PET_")}
        for container in _node_patch(job)["spec"]["containers"]:
            assert "env" not in container


def test_runtime_patch_manager_is_domain_prefixed() -> None:
    """v2.3.0 plugins/jobset/jobset.go: ``validation.IsDomainPrefixedPath`` on each manager."""
    (patch,) = _build(_experiment("verl", 1, 8))["spec"]["runtimePatches"]
    assert re.fullmatch(
        r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9/._~%!$&'()*+,;=:-]+", patch["manager"]
    )


def test_kueue_queue_label_and_suspend() -> None:
    """Kueue manages a TrainJob by its queue label and unsuspends ``spec.suspend``."""
    queued = _build(_experiment("verl", 2, 8, queue="team-a"))
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert queued["spec"]["suspend"] is True
    plain = _build(_experiment("verl", 2, 8))
    assert "suspend" not in plain["spec"]
    assert "kueue.x-k8s.io/queue-name" not in plain["metadata"]["labels"]


def test_priority_class_is_refused_naming_the_field() -> None:
    """v2.3.0 trainjob_types.go PodSpecPatch has no priorityClassName."""
    with pytest.raises(ValueError, match=r"spec\.resources\.priority_class.*job_kind: PyTorchJob"):
        _build(_experiment("verl", 1, 8, priority_class="high"))


def test_an_existing_trainjob_gets_only_its_metadata_patched() -> None:
    """runtimeRef and trainer are immutable (v2.3.0 CRD ``self == oldSelf``), runtimePatches
    only while suspended (jobset.go, checkRuntimePatchesImmutability), suspend and the queue
    label are Kueue's."""
    job = _build(_experiment("verl", 2, 8, queue="team-a"))
    update = trainjob.TrainJobBuilder().update(job)
    assert set(update) == {"apiVersion", "kind", "metadata"}
    assert "kueue.x-k8s.io/queue-name" not in update["metadata"]["labels"]
    assert update["metadata"]["name"] == job["metadata"]["name"]


# ---- the chart's ClusterTrainingRuntime ----


@pytest.mark.parametrize("gang", ["none", "scheduler-plugins", "volcano"])
def test_chart_runtime_validates_against_the_upstream_crd(gang: str) -> None:
    runtime = _runtime({"gangScheduler": gang})
    assert _errors("clustertrainingruntimes", runtime) == []
    assert runtime["metadata"]["name"] == trainjob.RUNTIME_NAME
    spec = runtime["spec"]
    assert spec["mlPolicy"] == {"numNodes": 1, "torch": {}}
    policy = spec.get("podGroupPolicy")
    pod = spec["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    if gang == "none":
        assert policy is None and "schedulerName" not in pod
    elif gang == "scheduler-plugins":
        assert policy == {"coscheduling": {"scheduleTimeoutSeconds": 60}}
        assert pod["schedulerName"] == "scheduler-plugins-scheduler"
    else:
        assert policy == {"volcano": {}}
        assert pod["schedulerName"] == "volcano"


def test_chart_runtime_is_what_the_trainer_and_the_builder_expect() -> None:
    """The trainer step is found by the ancestor label and its container by the name ``node``
    (v2.3.0 plugins/jobset/builder.go, Trainer; pkg/constants/constants.go), and the TrainJob's
    patch mounts /dev/shm from the same volume as the runtime."""
    runtime = _runtime()
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == trainjob.NODE
    assert rjob["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    pod = rjob["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == trainjob.NODE and "env" not in container
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    patch = _node_patch(_build(_experiment("verl", 1, 8)))["spec"]
    assert pod["volumes"][0] in patch["volumes"]
    assert container["volumeMounts"][0] in patch["containers"][0]["volumeMounts"]


def test_chart_runtime_can_be_switched_off() -> None:
    rendered = render_templates(
        PLATFORM_CHART, {"trainer": {"v2": {"runtime": {"enabled": False}}}}, API_SETS["trainer-v2"]
    )
    assert not any(t.strip() for p, t in rendered.items() if p.endswith("trainingruntime.yaml"))


# ---- phase from a TrainJob ----


def _job(conditions: dict[str, str], jobs: list[dict[str, int]] | None = None) -> dict[str, Any]:
    status_: dict[str, Any] = {
        "conditions": [{"type": t, "status": s, "reason": t} for t, s in conditions.items()]
    }
    if jobs is not None:
        status_["jobsStatus"] = [{"name": "node", **j} for j in jobs]
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "status": status_}


@pytest.mark.parametrize(
    ("job", "phase"),
    [
        (_job({}), "Pending"),
        (_job({"Suspended": "True"}), "Pending"),
        (_job({"Suspended": "False"}, [{"ready": 0, "active": 1}]), "Pending"),
        (_job({"Suspended": "False"}, [{"ready": 1, "active": 1}]), "Running"),
        (_job({}, [{"ready": 1, "active": 1}]), "Running"),
        (_job({"Complete": "True"}, [{"ready": 0, "succeeded": 1}]), "Succeeded"),
        (_job({"Failed": "True"}, [{"ready": 1, "failed": 1}]), "Failed"),
        (_job({"Complete": "True", "Failed": "True"}), "Failed"),
    ],
)
def test_trainjob_phase(job: dict[str, Any], phase: str) -> None:
    """v2.3.0 trainjob_types.go conditions Suspended, Complete, Failed (set by
    pkg/controller/trainjob_controller.go and plugins/jobset/jobset.go Status from the
    JobSet's Completed/Failed); jobsStatus ready counts child Jobs whose pods are all ready."""
    assert status.job_phase(job) == phase


def test_trainjob_conditions_are_copied() -> None:
    job = _job({"Suspended": "False", "Complete": "True"})
    assert [c["type"] for c in status.job_conditions(job)] == ["Suspended", "Complete"]


# ---- the kind the handlers choose ----


def _body(spec_resources: dict[str, Any] | None = None) -> dict[str, Any]:
    """The 2-node case's Experiment as the handlers get it, ``spec.resources`` updated."""
    doc = two_node_doc()
    doc["spec"]["resources"].update(spec_resources or {})
    return handler_body("sarl-grpo-math-2node", doc["spec"])


def _with_runtime(api: FakeApi) -> FakeApi:
    key = ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "", trainjob.RUNTIME_NAME)
    api.objects[key] = {"metadata": {"name": trainjob.RUNTIME_NAME}}
    return api


def _reconcile(body: dict[str, Any], api: FakeApi) -> dict[str, Any]:
    return handler_reconcile(body, api, [])


def _created(api: FakeApi) -> list[str]:
    return [k for verb, k in api.writes if verb == "create" and k.endswith("Job")]


@pytest.mark.parametrize(("trainer_v2", "kind"), [(True, "TrainJob"), (False, "PyTorchJob")])
def test_auto_picks_trainjob_when_served(trainer_v2: bool, kind: str) -> None:
    api = _with_runtime(FakeApi(trainer_v2=True)) if trainer_v2 else FakeApi()
    patch = _reconcile(_body(), api)
    assert _created(api) == [kind]
    assert patch["status"]["jobKind"] == kind


@pytest.mark.parametrize("kind", ["TrainJob", "PyTorchJob"])
def test_explicit_kind_is_used_when_both_are_served(kind: str) -> None:
    api = _with_runtime(FakeApi(trainer_v2=True))
    patch = _reconcile(_body({"job_kind": kind}), api)
    assert _created(api) == [kind]
    assert patch["status"]["jobKind"] == kind


@pytest.mark.parametrize(
    ("api", "install"),
    [
        (FakeApi(), "Kubeflow Trainer v2.3.0"),  # not served
        (FakeApi(trainer_v2=True), "ClusterTrainingRuntime sarl-torch-distributed not found"),
    ],
)
def test_explicit_trainjob_unavailable_fails_naming_what_to_install(
    api: FakeApi, install: str
) -> None:
    with pytest.raises(kopf.PermanentError, match=install):
        _reconcile(_body({"job_kind": "TrainJob"}), api)
    assert _created(api) == []


def test_auto_without_any_job_kind_names_both_installs() -> None:
    api = FakeApi(missing_kinds=frozenset({"PyTorchJob"}))
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.PermanentError) as raised:
        experiment_handlers.reconcile(
            _body(), patch, api, settings=SETTINGS, post_event=lambda *_: None,
            tracker_factory=lambda _uri: FakeTracker(),
        )  # fmt: skip
    assert "Training Operator" in str(raised.value) and "Kubeflow Trainer v2.3.0" in str(
        raised.value
    )
    ready = {c["type"]: c for c in patch["status"]["conditions"]}["Ready"]
    assert ready["reason"] == "PyTorchJobUnavailable"


def test_kind_is_kept_across_reconciles() -> None:
    """A run that started as a PyTorchJob stays one after the Trainer is installed, from
    status.jobKind or, without it (an Experiment from before it), from its existing job."""
    api = FakeApi()
    body = _body()
    body["status"] = _reconcile(body, api)["status"]
    assert body["status"]["jobKind"] == "PyTorchJob"
    upgraded = _with_runtime(FakeApi(trainer_v2=True))
    upgraded.objects.update(api.objects)
    _reconcile(body, upgraded)
    del body["status"]["jobKind"]
    patch = _reconcile(body, upgraded)
    assert "TrainJob" not in _created(upgraded)
    assert patch["status"]["jobKind"] == "PyTorchJob"


def test_second_reconcile_patches_only_the_trainjob_metadata() -> None:
    api = _with_runtime(FakeApi(trainer_v2=True))
    body = _body()
    body["status"] = _reconcile(body, api)["status"]
    created = copy.deepcopy(api.objects[(*TRAINJOB_KEY, body["metadata"]["name"])])
    body["spec"]["resources"]["nodes"] = 4  # immutable on the TrainJob: shapes the next run
    _reconcile(body, api)
    assert ("patch", "TrainJob") in api.writes
    assert api.objects[(*TRAINJOB_KEY, body["metadata"]["name"])]["spec"] == created["spec"]


def test_timer_reads_the_trainjob_phase() -> None:
    api = _with_runtime(FakeApi(trainer_v2=True))
    body = _body()
    body["status"] = _reconcile(body, api)["status"]
    job = api.objects[(*TRAINJOB_KEY, body["metadata"]["name"])]
    job["status"] = _job({"Complete": "True"})["status"]
    patch: dict[str, Any] = {}
    exp = experiment_handlers.experiment_from_body(body, PLATFORM)
    experiment_handlers.refresh_status(
        body, patch, api, exp=exp, settings=SETTINGS, post_event=lambda *_: None
    )
    assert patch["status"]["phase"] == "Succeeded"
