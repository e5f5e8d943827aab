"""Pure: a TrainJob and its ClusterTrainingRuntime resolved into the JobSet Kubeflow Trainer
v2.3.0 builds, and the JobSet into its pods as JobSet v0.12.0, the Job controller and the
kubelet make them (see the package docstring for the upstream files).
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tests.jobs.pytorchjob_emulator.controller import (
    LOOPBACK,
    EmulationError,
    Replica,
    expand,
    resolve_env,
)

UPSTREAM: Final = "kubeflow/trainer v2.3.0, kubernetes-sigs/jobset v0.12.0"
API_VERSION: Final = "trainer.kubeflow.org/v1alpha1"
#: The trainer's replicated job and container (``constants.Node``).
NODE: Final = "node"
ANCESTOR_LABEL: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
#: ``constants.ContainerTrainerPort``: PET_MASTER_PORT and the node container's port.
TRAINER_PORT: Final = 29500
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
RESTARTS_KEY: Final = "jobset.sigs.k8s.io/restart-attempt"
TORCH_RESERVED_ENV: Final = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
#: Strategic-merge keys of the lists a runtime patch reaches (JobSet's ``replicatedJobs``,
#: core/v1's struct tags); other lists (tolerations, command, args) are replaced whole.
_MERGE_KEYS: Final = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "schedulingGates": "name",
}


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """``patch`` strategic-merged into ``base`` for the fields above (``mergeRuntimePatches``:
    ``strategicpatch.StrategicMergePatch`` against ``JobSetSpec``): maps merge, a null deletes,
    keyed lists merge item by item (new items appended), other values are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(base.get(k), v, k) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in _MERGE_KEYS:
        merge_key = _MERGE_KEYS[key]
        out_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = [i for i, old in enumerate(out_list) if old.get(merge_key) == item[merge_key]]
            if at:
                out_list[at[0]] = strategic_merge(out_list[at[0]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def upsert(items: list[dict[str, Any]], new: Sequence[Mapping[str, Any]], key: str) -> None:
    """``apply.UpsertEnvVars``/``UpsertPort``: an item with the same ``key`` is replaced in
    place, a new one appended."""
    for item in new:
        at = [i for i, old in enumerate(items) if old.get(key) == item.get(key)]
        if at:
            items[at[0]] = dict(item)
        else:
            items.append(dict(item))


def _validate(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> None:
    """The Trainer webhook's checks this emulation relies on; EmulationError names the field."""
    if (trainjob.get("apiVersion"), trainjob.get("kind")) != (API_VERSION, "TrainJob"):
        raise EmulationError(f"not a {API_VERSION} TrainJob: {trainjob.get('kind')!r}")
    spec = trainjob["spec"]
    ref = spec["runtimeRef"]
    if ref.get("kind", "ClusterTrainingRuntime") != runtime.get("kind"):
        raise EmulationError(f"spec.runtimeRef.kind {ref.get('kind')!r}: not the runtime's")
    if ref["name"] != runtime["metadata"]["name"]:
        raise EmulationError(f"spec.runtimeRef.name {ref['name']!r}: no such runtime")
    if spec.get("initializer") or spec.get("suspend"):
        raise EmulationError("spec.initializer and spec.suspend are not emulated")
    if "torch" not in (runtime["spec"].get("mlPolicy") or {}):
        raise EmulationError("runtime spec.mlPolicy.torch: only the torch plugin is emulated")
    trainer = spec.get("trainer") or {}
    reserved = sorted({e["name"] for e in trainer.get("env") or []} & set(TORCH_RESERVED_ENV))
    if reserved:  # torch.go, Validate
        raise EmulationError(f"spec.trainer.env: must not have reserved envs: {reserved}")
    for patch in spec.get("runtimePatches") or []:
        if "/" not in patch.get("manager", ""):  # jobset.go: IsDomainPrefixedPath
            raise EmulationError(f"spec.runtimePatches.manager {patch.get('manager')!r}")
        patched = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        for rjob in (patched.get("spec") or {}).get("replicatedJobs") or []:
            pod = rjob.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
            if any(c.get("env") and c["name"] == NODE for c in pod.get("containers") or []):
                raise EmulationError("spec.runtimePatches: must not have envs for the node")


def _quantity(raw: Any) -> int:
    """``resource.Quantity.Value()``: rounded up to an integer (``500m`` -> 1)."""
    text = str(raw)
    if text.endswith("m"):
        return math.ceil(int(text[:-1]) / 1000)
    return math.ceil(float(text))


def _gpus(resources: Mapping[str, Any]) -> int:
    """``runtime.GetNumGPUPerNode``: the first resource whose name contains ``gpu``, requests
    before limits."""
    for where in ("requests", "limits"):
        for name, value in (resources.get(where) or {}).items():
            if "gpu" in name.lower() and _quantity(value):
                return _quantity(value)
    return 0


def _proc_per_node(trainer: Mapping[str, Any], resources: Mapping[str, Any]) -> str:
    """torch.go: ``numProcPerNode`` or ``auto``; ``auto`` without a GPU is the CPU request (else
    limit), at least 1."""
    if trainer.get("numProcPerNode") is not None:
        return str(int(trainer["numProcPerNode"]))
    if _gpus(resources):
        return "auto"
    cpu = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu")
    return str(max(1, _quantity(cpu) if cpu else 0))


def _torch_env(name: str, count: int, nproc: str) -> list[dict[str, Any]]:
    """torch.go ``EnforceMLPolicy``: the PET_* variables upserted into the node container."""
    return [
        {"name": "PET_NNODES", "value": str(count)},
        {"name": "PET_NPROC_PER_NODE", "value": nproc},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
        },
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]


def jobset(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet the Trainer creates for ``trainjob`` (``TrainingRuntime.newRuntimeInfo``, the
    torch and jobset plugins), with JobSet's webhook defaults applied."""
    _validate(trainjob, runtime)
    name, spec = trainjob["metadata"]["name"], trainjob["spec"]
    template = copy.deepcopy(runtime["spec"]["template"])
    labels = dict(template.get("metadata", {}).get("labels") or {})
    annotations = dict(template.get("metadata", {}).get("annotations") or {})
    for patch in spec.get("runtimePatches") or []:
        patched = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        labels.update((patched.get("metadata") or {}).get("labels") or {})
        annotations.update((patched.get("metadata") or {}).get("annotations") or {})
        if patched.get("spec"):
            template["spec"] = strategic_merge(template["spec"], patched["spec"])
    js_spec = template["spec"]
    trainer = spec.get("trainer") or {}
    policy_nodes = int(runtime["spec"]["mlPolicy"].get("numNodes") or 1)
    for rjob in js_spec["replicatedJobs"]:
        job_template = rjob["template"]
        pod = job_template["spec"]["template"]["spec"]
        if (job_template.get("metadata") or {}).get("labels", {}).get(ANCESTOR_LABEL) != "trainer":
            continue
        count = int(trainer.get("numNodes") or policy_nodes)
        rjob["replicas"] = 1  # builder.go Trainer
        job_template["spec"]["parallelism"] = job_template["spec"]["completions"] = count
        (node,) = [c for c in pod["containers"] if c["name"] == NODE]
        resources = node.get("resources") or {}
        if trainer.get("resourcesPerNode"):  # MergeResourceRequirements: the TrainJob's win
            merged = {k: dict(v) for k, v in resources.items()}
            for where, amounts in trainer["resourcesPerNode"].items():
                merged.setdefault(where, {}).update(amounts)
            node["resources"] = resources = merged
        env = node.setdefault("env", [])
        upsert(env, trainer.get("env") or [], "name")
        upsert(env, _torch_env(name, count, _proc_per_node(trainer, resources)), "name")
        upsert(node.setdefault("ports", []), [{"containerPort": TRAINER_PORT}], "containerPort")
        for field in ("image", "command", "args"):
            if trainer.get(field) is not None:
                node[field] = copy.deepcopy(trainer[field])
    # JobSet's webhook defaults (pkg/webhooks/jobset_webhook.go).
    js_spec.setdefault("successPolicy", {"operator": "All"})
    network = js_spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for rjob in js_spec["replicatedJobs"]:
        rjob.setdefault("replicas", 1)
        rjob["template"]["spec"].setdefault("completionMode", "Indexed")
        pod = rjob["template"]["spec"]["template"]["spec"]
        pod["restartPolicy"] = pod.get("restartPolicy") or "OnFailure"
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": trainjob["metadata"].get("namespace", "default"),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": js_spec,
    }


def subdomain(js: Mapping[str, Any]) -> str:
    """``GetSubdomain``: ``spec.network.subdomain``, else the JobSet's name (its headless
    Service)."""
    return str(js["spec"].get("network", {}).get("subdomain") or js["metadata"]["name"])


def _object_labels(
    js: Mapping[str, Any], rjob: Mapping[str, Any], job_index: int, restarts: int
) -> dict[str, str]:
    """``labelAndAnnotateObject``: set as labels and as annotations on the Job and its pods."""
    rjobs = js["spec"]["replicatedJobs"]
    before = sum(int(r["replicas"]) for r in rjobs[: rjobs.index(rjob)])
    return {
        "jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"],
        "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
        RESTARTS_KEY: str(restarts),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob["replicas"]),
        "jobset.sigs.k8s.io/global-replicas": str(sum(int(r["replicas"]) for r in rjobs)),
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-global-index": str(before + job_index),
    }


def pod_name(hostname: str, restarts: int) -> str:
    """The pod's ``metadata.name``: the Job controller's ``generateName`` ``<job>-<index>-``
    with a suffix (here derived from the JobSet restart, so stable within one)."""
    return f"{hostname}-{hashlib.sha1(f'{hostname}/{restarts}'.encode()).hexdigest()[:5]}"


def pods(
    js: Mapping[str, Any],
    *,
    restarts: int = 0,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
    configmaps: Mapping[str, Mapping[str, str]] | None = None,
    pod_ips: Mapping[str, str] | None = None,
    node_name: str = "node-0",
) -> list[Replica]:
    """Every pod of JobSet ``js`` after ``restarts`` JobSet restarts, by replicated job, Job
    index and completion index. Each :class:`Replica` is named by its hostname
    ``<jobset>-<replicatedJob>-<jobIndex>-<completionIndex>`` (stable across restarts; the pod
    name has the Job controller's random suffix, :func:`pod_name`); ``index`` and ``rank`` are
    the completion index; ``pod_ips`` maps hostnames to ``status.podIP``."""
    namespace = js["metadata"]["namespace"]
    out = []
    for rjob in js["spec"]["replicatedJobs"]:
        job_template = rjob["template"]
        for job_index in range(int(rjob["replicas"])):
            job_name = f"{js['metadata']['name']}-{rjob['name']}-{job_index}"
            jobset_keys = _object_labels(js, rjob, job_index, restarts)
            for index in range(int(job_template["spec"].get("completions") or 1)):
                out.append(
                    _pod(js, rjob, job_name, index, jobset_keys, namespace, node_name,
                         secrets or {}, configmaps or {}, pod_ips, restarts)
                )  # fmt: skip
    return out


def _pod(
    js: Mapping[str, Any],
    rjob: Mapping[str, Any],
    job_name: str,
    index: int,
    jobset_keys: Mapping[str, str],
    namespace: str,
    node_name: str,
    secrets: Mapping[str, Mapping[str, str]],
    configmaps: Mapping[str, Mapping[str, str]],
    pod_ips: Mapping[str, str] | None,
    restarts: int,
) -> Replica:
    template = rjob["template"]["spec"]["template"]
    pod_spec = template["spec"]
    hostname = f"{job_name}-{index}"  # the Job controller's hostname for an Indexed pod
    job_keys = {COMPLETION_INDEX: str(index), "batch.kubernetes.io/job-name": job_name}
    labels = {**(template.get("metadata", {}).get("labels") or {}), **jobset_keys, **job_keys}
    annotations = {
        **(template.get("metadata", {}).get("annotations") or {}),
        **jobset_keys,
        COMPLETION_INDEX: str(index),
    }
    containers = pod_spec.get("containers") or []
    if len(containers) != 1 or pod_spec.get("initContainers"):
        raise EmulationError(f"{hostname}: one container, no init containers (not emulated)")
    (container,) = containers
    if not container.get("command"):
        raise EmulationError(f"{hostname}: no command (there is no image entrypoint here)")
    fields: dict[str, Any] = {
        "metadata.name": pod_name(hostname, restarts),
        "metadata.namespace": namespace,
        "metadata.labels": labels,
        "metadata.annotations": annotations,
        "spec.nodeName": node_name,
        "status.hostIP": LOOPBACK,
    }
    if pod_ips is not None:
        fields["status.podIP"] = pod_ips[hostname]
    # The Job controller adds JOB_COMPLETION_INDEX to every container (addCompletionIndexEnv).
    index_env = {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
    }
    env = resolve_env(
        [*(container.get("env") or []), index_env],
        secrets=secrets,
        configmaps=configmaps,
        fields=fields,
    )
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    return Replica(
        name=hostname,
        replica_type=rjob["name"],
        index=index,
        rank=index,
        restart_policy=pod_spec["restartPolicy"],
        labels=labels,
        command=tuple(expand(a, env) for a in argv),
        env=env,
        volume_mounts=tuple(container.get("volumeMounts") or ()),
        volumes=tuple(pod_spec.get("volumes") or ()),
        hostname=hostname,
        subdomain=subdomain(js),
    )
