"""The Training Operator v1.9.0 controller's and the kubelet's part, pure: defaults, the
webhook's checks, pod names and labels, and each replica's resolved environment and command
(see the package docstring for the upstream files).
"""

from __future__ import annotations

import copy
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sarl_operator.scheduling import MASTER_WAIT_CONTAINER

UPSTREAM: Final = "kubeflow/training-operator v1.9.0"
CONTAINER_NAME: Final = "pytorch"
PORT_NAME: Final = "pytorchjob-port"
DEFAULT_PORT: Final = 23456
DEFAULT_NPROC_PER_NODE: Final = "auto"
DEFAULT_RESTART_POLICY: Final = "OnFailure"
REPLICA_TYPES: Final = ("Master", "Worker")
OPERATOR_NAME: Final = "pytorchjob-controller"
LOOPBACK: Final = "127.0.0.1"


class EmulationError(RuntimeError):
    """The job is refused (by the webhook, or because this emulation does not cover it)."""


class ContainerConfigError(RuntimeError):
    """The kubelet's CreateContainerConfigError: a referenced Secret, ConfigMap or key is
    missing."""


# ---- pure: the controller and the kubelet's environment ----


def apply_defaults(job: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``job`` with ``SetDefaults_PyTorchJob`` applied (see the module docstring)."""
    out = copy.deepcopy(dict(job))
    spec = out.setdefault("spec", {})
    spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    replicas = spec.get("pytorchReplicaSpecs") or {}
    for camel in REPLICA_TYPES:  # setTypeNameToCamelCase
        for key in list(replicas):
            if key.lower() == camel.lower() and key != camel:
                replicas[camel] = replicas.pop(key)
    for rspec in replicas.values():
        rspec.setdefault("replicas", 1)
        if not rspec.get("restartPolicy"):
            rspec["restartPolicy"] = DEFAULT_RESTART_POLICY
        containers = rspec.get("template", {}).get("spec", {}).get("containers") or []
        if containers:
            names = [c.get("name") for c in containers]
            target = containers[names.index(CONTAINER_NAME) if CONTAINER_NAME in names else 0]
            ports = target.setdefault("ports", [])
            if not any(p.get("name") == PORT_NAME for p in ports):
                ports.append({"name": PORT_NAME, "containerPort": DEFAULT_PORT})
    elastic = spec.get("elasticPolicy")
    if elastic is None or elastic.get("nProcPerNode") is None:
        spec.setdefault("nprocPerNode", DEFAULT_NPROC_PER_NODE)
    return out


def validate(job: Mapping[str, Any]) -> None:
    """The webhook's checks, plus what this emulation refuses; EmulationError names the field."""
    if (job.get("apiVersion"), job.get("kind")) != ("kubeflow.org/v1", "PyTorchJob"):
        raise EmulationError(f"not a kubeflow.org/v1 PyTorchJob: {job.get('kind')!r}")
    spec = job["spec"]
    if spec.get("elasticPolicy") is not None:
        raise EmulationError("spec.elasticPolicy: elastic jobs are not emulated")
    replicas = spec.get("pytorchReplicaSpecs")
    if not replicas:
        raise EmulationError("spec.pytorchReplicaSpecs: Required value")
    for rtype, rspec in replicas.items():
        path = f"spec.pytorchReplicaSpecs[{rtype}]"
        if rtype not in REPLICA_TYPES:
            raise EmulationError(f"{path}: Unsupported value: supported {list(REPLICA_TYPES)}")
        pod = rspec.get("template", {}).get("spec", {})
        containers = pod.get("containers") or []
        if not any(c.get("name") == CONTAINER_NAME for c in containers):
            raise EmulationError(f"{path}.template.spec.containers: a container named pytorch")
        if any(not c.get("image") for c in containers):
            raise EmulationError(f"{path}.template.spec.containers: image: Required value")
        if rtype == "Master" and rspec["replicas"] != 1:
            raise EmulationError(f"{path}.replicas: Forbidden: must be 1")
        if rspec["replicas"] < 1:
            raise EmulationError(f"{path}.replicas: Forbidden: must be at least 1")
        # The operator's wait-for-master init container (sarl_operator.scheduling) waits until
        # the Master's name resolves, which here it does from the start: nothing to run.
        inits = [c.get("name") for c in pod.get("initContainers") or []]
        if len(containers) > 1 or any(name != MASTER_WAIT_CONTAINER for name in inits):
            raise EmulationError(f"{path}: sidecars and init containers are not emulated")
        for mount in containers[0].get("volumeMounts") or []:
            where = f"{path}.volumeMounts[{mount.get('name')}]"
            if mount.get("subPath"):
                raise EmulationError(f"{where}: subPath is not emulated")
            if Path(mount["mountPath"]).is_relative_to("/tmp"):
                raise EmulationError(f"{where}: below /tmp, which each container start replaces")


def replica_name(job_name: str, rtype: str, index: int) -> str:
    """``GenGeneralName``: ``<job>-<type lowercased>-<index>``, ``/`` replaced by ``-``."""
    return f"{job_name}-{rtype.lower()}-{index}".replace("/", "-")


def _nproc_int(spec: Mapping[str, Any]) -> int:
    raw = spec.get("nprocPerNode")
    return int(raw) if isinstance(raw, str) and re.fullmatch(r"[+-]?\d+", raw) else 1


def _master_port(spec: Mapping[str, Any]) -> int:
    containers = spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    for container in containers:
        if container.get("name") == CONTAINER_NAME:
            for port in container.get("ports") or []:
                if port.get("name") == PORT_NAME:
                    return int(port["containerPort"])
    raise EmulationError("port not found")  # getPortFromPyTorchJob's error


def controller_env(job: Mapping[str, Any], rtype: str, index: int) -> list[dict[str, str]]:
    """The variables ``setPodEnv`` appends to each container of replica ``rtype`` ``index`` of a
    defaulted job, in its order."""
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(int(r["replicas"]) for r in replicas.values())
    env = [("PYTHONUNBUFFERED", "1")]
    if "Master" in replicas:
        port, addr = str(_master_port(spec)), replica_name(job["metadata"]["name"], "Master", 0)
        rank = index + 1 if rtype == "Worker" else index
        env += [("MASTER_PORT", port), ("PET_MASTER_PORT", port)]
        env += [("MASTER_ADDR", addr), ("PET_MASTER_ADDR", addr)]
        env += [("WORLD_SIZE", str(total * _nproc_int(spec))), ("RANK", str(rank))]
        env += [("PET_NODE_RANK", str(rank))]
    if spec.get("nprocPerNode") is not None:
        env.append(("PET_NPROC_PER_NODE", str(spec["nprocPerNode"])))
    env.append(("PET_NNODES", str(total)))
    return [{"name": name, "value": value} for name, value in env]


_REF = re.compile(r"\$(\$|\(([^)]*)\))")


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: a defined VAR is replaced, an undefined one is left
    as written, ``$$`` is a literal ``$``."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        name = match.group(2)
        return env.get(name, match.group(0))

    return _REF.sub(one, text)


def _ref_value(
    ref_kind: str,
    ref: Mapping[str, Any],
    sources: Mapping[str, Mapping[str, str]],
    var: str,
) -> str | None:
    name, key = ref.get("name", ""), ref.get("key", "")
    if name not in sources:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f"env {var}: {ref_kind} {name!r} not found")
    if key not in sources[name]:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f"env {var}: couldn't find key {key} in {ref_kind} {name!r}")
    return sources[name][key]


def _field_value(path: str, fields: Mapping[str, Any], var: str) -> str:
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str(fields.get(f"metadata.{match.group(1)}", {}).get(match.group(2), ""))
    if path not in fields:
        raise EmulationError(f"env {var}: fieldRef {path!r} is not emulated")
    return str(fields[path])


def resolve_env(
    env: Sequence[Mapping[str, Any]],
    *,
    secrets: Mapping[str, Mapping[str, str]],
    configmaps: Mapping[str, Mapping[str, str]],
    fields: Mapping[str, Any],
) -> dict[str, str]:
    """The container's environment as the kubelet builds it (``makeEnvironmentVariables``):
    in order, each value expanded against the variables before it, a later name winning."""
    out: dict[str, str] = {}
    for var in env:
        name = var["name"]
        source = var.get("valueFrom")
        if source is None:
            value: str | None = expand(str(var.get("value", "")), out)
        elif "secretKeyRef" in source:
            value = _ref_value("secret", source["secretKeyRef"], secrets, name)
        elif "configMapKeyRef" in source:
            value = _ref_value("configmap", source["configMapKeyRef"], configmaps, name)
        elif "fieldRef" in source:
            value = _field_value(source["fieldRef"]["fieldPath"], fields, name)
        else:
            raise EmulationError(f"env {name}: valueFrom {sorted(source)} is not emulated")
        if value is not None:
            out[name] = value
    return out


@dataclass(frozen=True)
class Replica:
    """One pod of the job: its name, place, restart policy and resolved container."""

    name: str
    replica_type: str
    index: int
    rank: int | None  # RANK, when the job has a Master
    restart_policy: str
    labels: dict[str, str]
    command: tuple[str, ...]  # command + args, $(VAR) expanded
    env: dict[str, str]
    volume_mounts: tuple[dict[str, Any], ...]
    volumes: tuple[dict[str, Any], ...]
    #: ``spec.hostname`` and ``spec.subdomain`` where they differ from the name (a Job's
    #: indexed pods, :mod:`tests.jobs.trainjob_emulator`); None: the pod name, no subdomain.
    hostname: str | None = None
    subdomain: str | None = None

    @property
    def host(self) -> str:
        """The pod's hostname (``HOSTNAME``, ``hostname``)."""
        return self.hostname or self.name


def _labels(
    job: Mapping[str, Any], template: Mapping[str, Any], rtype: str, index: int
) -> dict[str, str]:
    labels = dict(template.get("metadata", {}).get("labels") or {})
    labels.update(
        {
            "training.kubeflow.org/operator-name": OPERATOR_NAME,
            "training.kubeflow.org/job-name": job["metadata"]["name"].replace("/", "-"),
            "training.kubeflow.org/replica-type": rtype.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
    )
    if rtype == "Master" or ("Master" not in job["spec"]["pytorchReplicaSpecs"] and index == 0):
        labels["training.kubeflow.org/job-role"] = "master"  # IsMasterRole
    return labels


def replica_envs(
    job: Mapping[str, Any],
    *,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
    configmaps: Mapping[str, Mapping[str, str]] | None = None,
    pod_ips: Mapping[str, str] | None = None,
    node_name: str = "",
) -> list[Replica]:
    """Every pod of ``job`` (defaults applied, validated), Master first: its name, rank and the
    ``pytorch`` container's resolved environment and command. ``secrets`` and ``configmaps``
    map a name to its data; ``pod_ips`` gives ``status.podIP`` for fieldRefs."""
    job = apply_defaults(job)
    validate(job)
    namespace = job["metadata"].get("namespace", "default")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    out = []
    for rtype in (t for t in REPLICA_TYPES if t in replicas):
        rspec = replicas[rtype]
        for index in range(int(rspec["replicas"])):
            name = replica_name(job["metadata"]["name"], rtype, index)
            template = rspec["template"]
            (container,) = template["spec"]["containers"]
            labels = _labels(job, template, rtype, index)
            fields = {
                "metadata.name": name,
                "metadata.namespace": namespace,
                "metadata.labels": labels,
                "metadata.annotations": template.get("metadata", {}).get("annotations") or {},
                "spec.nodeName": node_name or socket.gethostname(),
                "status.hostIP": LOOPBACK,
            }
            if pod_ips is not None:
                fields["status.podIP"] = pod_ips[name]
            env = resolve_env(
                [*(container.get("env") or []), *controller_env(job, rtype, index)],
                secrets=secrets or {},
                configmaps=configmaps or {},
                fields=fields,
            )
            argv = [*(container.get("command") or []), *(container.get("args") or [])]
            if not container.get("command"):
                raise EmulationError(f"{name}: no command (there is no image entrypoint here)")
            out.append(
                Replica(
                    name=name,
                    replica_type=rtype,
                    index=index,
                    rank=int(env["RANK"]) if "Master" in replicas else None,
                    restart_policy=rspec["restartPolicy"],
                    labels=labels,
                    command=tuple(expand(a, env) for a in argv),
                    env=env,
                    volume_mounts=tuple(container.get("volumeMounts") or ()),
                    volumes=tuple(template["spec"].get("volumes") or ()),
                )
            )
    return out


def deleted_when_finished(clean_pod_policy: str, phase: str) -> bool:
    """Whether a finished job's pod in ``phase`` is deleted: ``DeletePodsAndServices`` in
    ``pkg/controller.v1/common/job.go`` at kubeflow/training-operator ``v1.9.4`` (None: none;
    Running: Running and Pending pods; All: every pod). Since v1.9.4 (trainer#3419) this holds
    for a job failed past its backoff limit too: the Failed condition is set before the cleanup
    (v1.9.0 cleaned up first, unfinished, and so deleted every pod whatever the policy)."""
    if clean_pod_policy == "None":
        return False
    if clean_pod_policy == "Running":
        return phase in ("Running", "Pending")
    return True


def should_restart(policy: str, exit_code: int) -> bool:
    """Whether a container that exited with ``exit_code`` is started again."""
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return exit_code != 0
    if policy == "ExitCode":  # trainutil.IsRetryableExitCode: killed by a signal
        return exit_code >= 128
    return False
