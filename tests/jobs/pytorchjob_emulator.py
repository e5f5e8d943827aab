"""Kubeflow Training Operator v1.9.0 emulation: a PyTorchJob's replicas as local processes.

Used by the multi-node job tests (``test_trl_multinode.py``, ``test_verl_multinode.py``) to run
the PyTorchJob that ``sarl_operator.builders.pytorchjob`` builds, one process per replica, on
this machine's CPU; ``test_pytorchjob_emulator.py`` checks it against the upstream behaviour.

What it reproduces, read from kubeflow/training-operator at tag ``v1.9.0``:

* defaulting (``pkg/apis/kubeflow.org/v1/pytorch_defaults.go``, ``defaulting_utils.go``):
  replica type keys camel-cased, ``replicas`` 1, ``restartPolicy`` OnFailure, container port
  ``pytorchjob-port``/23456 on the container named ``pytorch`` (else the first), ``nprocPerNode``
  ``"auto"``, ``runPolicy.cleanPodPolicy`` None;
* the admission webhook's checks (``pkg/webhooks/pytorch/pytorchjob_webhook.go``): Master and
  Worker only, one Master, a ``pytorch`` container, an image on every container;
* pod names and labels (``pkg/core/utils.go`` ``GenGeneralName``: ``<job>-<type>-<index>``,
  ``pkg/controller.v1/common/pod.go``);
* the environment appended to every container (``pkg/controller.v1/pytorch/envvar.go``
  ``setPodEnv``, ``master.go``): ``PYTHONUNBUFFERED``; with a Master: ``MASTER_PORT``,
  ``PET_MASTER_PORT``, ``MASTER_ADDR``/``PET_MASTER_ADDR`` = ``<job>-master-0``, ``WORLD_SIZE`` =
  replicas x int(nprocPerNode) (1 when not a number), ``RANK`` = ``PET_NODE_RANK`` (Master 0,
  Worker i -> i + 1); ``PET_NPROC_PER_NODE`` = nprocPerNode; ``PET_NNODES`` = replicas. (v1.7.0
  set ``PET_NPROC_PER_NODE`` only inside the Master block, so a Worker-only job lacked it.)
* restarts and the job's end (``pkg/core/pod.go`` ``SetRestartPolicy``, ``pkg/core/job.go``
  ``PastBackoffLimit``, ``pytorchjob_controller.go`` ``UpdateJobStatus``): a container that fails
  under OnFailure/Always (ExitCode: exit code >= 128) is started again with the same environment;
  the job fails once the restarts reach ``runPolicy.backoffLimit`` (every pod is then deleted),
  and succeeds when the Master (or, without one, every Worker) exits 0.

The kubelet's part, also emulated: ``valueFrom`` (``secretKeyRef`` and ``configMapKeyRef``,
missing ones raising :class:`ContainerConfigError` as CreateContainerConfigError does;
``fieldRef``), ``$(VAR)`` expansion in env values, command and args, later duplicates winning;
ConfigMap and emptyDir volumes; a managed ``/etc/hosts``; a fresh ``/tmp`` per container start
(the writable layer a restarted container loses); ``HOSTNAME`` = pod name.

How a replica runs (probed at run time, see :func:`namespaces_unavailable` and
:func:`netns_unavailable`):

* as root with ``unshare``: each container start gets its own mount, UTS and PID namespaces
  (``ray stop`` in one pod cannot see another's processes; when the main process ends, the
  kernel kills the rest, as in a container). The volumes are bind-mounted at their
  ``mountPath`` (a missing mount point is made in an overlay of its parent directory, so the
  host's ``/etc`` is never written), the pod's hosts file over ``/etc/hosts``; the hostname is
  the pod name;
* with ``ip netns`` as well (network ``"netns"``): each pod has its own network namespace, with
  ``eth0`` (a veth pair) on a host bridge ``10.213.<n>.0/24`` whose ``.1`` is the host; pod names
  resolve to pod addresses through the hosts file (cluster DNS and the Services the operator
  creates are not here). Services the pods call must listen on :attr:`PodNetwork.host_address`;
* otherwise (network ``"loopback"``): every pod name resolves to 127.0.0.1 (all replicas share
  the host's network and ports); without root, volume mount paths in command, args and env values
  are rewritten to the host directories, pod names in env values to 127.0.0.1, and ``/tmp`` is
  shared — enough for the pure checks, not for trainers that write fixed paths under ``/tmp``.

``python`` in a container command is the venv's: its ``bin`` directory leads ``PATH``.

Not emulated: the Kubernetes API server (no objects, watches or status), images (the host's
files are the container's), resource limits and GPUs, sidecars, init containers, elasticPolicy,
``subPath`` and mount paths below ``/tmp`` (all refused), the workers' init container (it waits
until the master's name resolves, which here it does from the start), Service environment
variables, cluster DNS (names resolve from the pods' /etc/hosts only, and the pods reach no DNS
server: Ray's bundled gRPC client, c-ares, then fails to resolve them unless ``image_env`` sets
``GRPC_DNS_RESOLVER=native``), the kubelet's CrashLoopBackOff delay (``restart_delay_s``, 0 by
default), restarts after the job has finished (the kubelet would go on restarting a failing
container of a pod that ``cleanPodPolicy: None`` keeps), and pods re-created on another node.
Every process of a replica is killed on exit (its process group; in namespace mode its PID
namespace dies with it); namespaces, veths and the bridge are removed even when the test fails.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import secrets as token
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final, Literal

UPSTREAM: Final = "kubeflow/training-operator v1.9.0"
CONTAINER_NAME: Final = "pytorch"
PORT_NAME: Final = "pytorchjob-port"
DEFAULT_PORT: Final = 23456
DEFAULT_NPROC_PER_NODE: Final = "auto"
DEFAULT_RESTART_POLICY: Final = "OnFailure"
REPLICA_TYPES: Final = ("Master", "Worker")
OPERATOR_NAME: Final = "pytorchjob-controller"
LOOPBACK: Final = "127.0.0.1"
_SYSTEM_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Network = Literal["auto", "netns", "loopback"]


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
        if len(containers) > 1 or pod.get("initContainers"):
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


def should_restart(policy: str, exit_code: int) -> bool:
    """Whether a container that exited with ``exit_code`` is started again."""
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return exit_code != 0
    if policy == "ExitCode":  # trainutil.IsRetryableExitCode: killed by a signal
        return exit_code >= 128
    return False


# ---- runtime: capabilities and the pod network ----


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{shlex.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@cache
def namespaces_unavailable() -> str | None:
    """Why containers cannot get private mount/UTS namespaces here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root for mount and PID namespaces (unshare)"
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    try:
        _run("unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "true")
    except RuntimeError as e:
        return str(e)
    return None


@cache
def netns_unavailable() -> str | None:
    """Why pods cannot get their own network namespaces here (None: they can)."""
    if (reason := namespaces_unavailable()) is not None:
        return reason
    if not shutil.which("ip"):
        return "no ip command (iproute2)"
    probe = f"sarl-probe-{token.token_hex(3)}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "del", probe)
    except RuntimeError as e:
        return str(e)
    return None


@dataclass
class PodNetwork:
    """Where pods live: their own network namespaces on a host bridge, or the loopback."""

    mode: Literal["netns", "loopback"]
    host_address: str
    _prefix: str = ""  # 10.213.<n>
    _token: str = ""
    _links: list[str] = field(default_factory=list)  # host veth ends
    _netns: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"sarlbr{self._token}"

    def attach(self, pods: Sequence[str]) -> dict[str, tuple[str | None, str]]:
        """A network namespace (None on loopback) and an address per pod."""
        if self.mode == "loopback":
            return {pod: (None, LOOPBACK) for pod in pods}
        out: dict[str, tuple[str | None, str]] = {}
        for pod in pods:
            slot = len(self._netns)
            if slot > 250:
                raise EmulationError("more than 250 pods on one PodNetwork")
            ns, host_end = f"sarl-{self._token}-{slot}", f"sarl{self._token}h{slot}"
            address = f"{self._prefix}.{slot + 2}"
            self._netns.append(ns)  # recorded first, so that a failure below is cleaned up
            self._links.append(host_end)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", host_end, "master", self.bridge, "up")
            inside = ("ip", "-n", ns)
            _run(*inside, "addr", "add", f"{address}/24", "dev", "eth0")
            _run(*inside, "link", "set", "eth0", "up")
            _run(*inside, "link", "set", "lo", "up")
            # A default route, as a pod has: Ray finds its node address by the route out.
            _run(*inside, "route", "add", "default", "via", self.host_address)
            out[pod] = (ns, address)
        return out

    def release(self, namespaces: Sequence[str]) -> list[str]:
        """Kill what is left in these namespaces and remove them with their veths; returns the
        errors (empty when everything went)."""
        errors = []
        for ns in namespaces:
            with contextlib.suppress(RuntimeError):
                for pid in _run("ip", "netns", "pids", ns).split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            slot = self._netns.index(ns)
            # Deleting the host end deletes its peer (eth0) too.
            for step in (("link", "del", self._links[slot]), ("netns", "del", ns)):
                try:
                    _run("ip", *step)
                except RuntimeError as e:
                    if not _gone(e):
                        errors.append(str(e))
            self._netns[slot] = self._links[slot] = ""
        return errors

    def teardown(self) -> list[str]:
        """:meth:`release` every namespace, then remove the bridge; returns the errors."""
        errors = self.release([ns for ns in self._netns if ns])
        if self._token:
            try:
                _run("ip", "link", "del", self.bridge)
            except RuntimeError as e:
                if not _gone(e):
                    errors.append(str(e))
        self._token = ""
        return errors


def _gone(error: RuntimeError) -> bool:
    """Whether an ``ip ... del`` failed only because the object is already gone."""
    return "Cannot find device" in str(error) or "No such file" in str(error)


def _free_subnet() -> str:
    used = _run("ip", "-4", "-o", "addr", "show")
    for n in range(256):
        if f" 10.213.{n}." not in used:
            return f"10.213.{n}"
    raise RuntimeError("no free 10.213.<n>.0/24 subnet")


@contextlib.contextmanager
def pod_network(network: Network = "auto") -> Iterator[PodNetwork]:
    """A :class:`PodNetwork`: ``"netns"`` (raise if unavailable), ``"loopback"``, or ``"auto"``
    (netns when :func:`netns_unavailable` says it works)."""
    if network == "netns" and (reason := netns_unavailable()) is not None:
        raise EmulationError(f"network namespaces unavailable: {reason}")
    if network == "loopback" or (network == "auto" and netns_unavailable() is not None):
        yield PodNetwork("loopback", LOOPBACK)
        return
    prefix = _free_subnet()
    net = PodNetwork("netns", f"{prefix}.1", _prefix=prefix, _token=token.token_hex(3))
    try:
        _run("ip", "link", "add", net.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{net.host_address}/24", "dev", net.bridge)
        _run("ip", "link", "set", net.bridge, "up")
        yield net
    finally:
        errors = net.teardown()
        if errors:
            raise RuntimeError(f"pod network teardown: {'; '.join(errors)}")


# ---- runtime: containers ----


@dataclass
class _Pod:
    replica: Replica
    netns: str | None
    address: str
    root: Path  # hosts file, volumes/, attempt-<n>/
    volume_dirs: dict[str, Path]  # volume name -> host directory
    process: subprocess.Popen[bytes] | None = None
    attempt: int = 0
    exit_codes: list[int] = field(default_factory=list)
    restart_at: float | None = None

    def attempt_dir(self, attempt: int | None = None) -> Path:
        return self.root / f"attempt-{self.attempt if attempt is None else attempt}"


@dataclass(frozen=True)
class JobResult:
    """How the job ended: ``Succeeded`` or ``Failed``, each pod's last exit code (128 + signal
    for a killed container, as the kubelet reports it) and restart count."""

    condition: str
    exit_codes: dict[str, int]
    restarts: dict[str, int]


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _write_volume(volume: Mapping[str, Any], dest: Path, configmaps: Mapping[str, Any]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    if "emptyDir" in volume:  # medium Memory too: a directory that lives as long as the pod
        return
    if "configMap" not in volume:
        raise EmulationError(f"volume {volume['name']}: only configMap and emptyDir are emulated")
    ref = volume["configMap"]
    data = configmaps.get(ref["name"])
    if data is None:
        if ref.get("optional"):
            return
        raise ContainerConfigError(f'volume {volume["name"]}: configmap "{ref["name"]}" not found')
    items = ref.get("items") or [{"key": key, "path": key} for key in data]
    for item in items:
        if item["key"] not in data:
            raise ContainerConfigError(f"configmap {ref['name']!r}: no key {item['key']!r}")
        path = dest / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data[item["key"]], encoding="utf-8")


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return [line.split()[4].replace("\\040", " ") for line in f]


def _existing_parent(path: str) -> str:
    parent = Path(path)
    while not parent.exists():
        parent = parent.parent
    if parent == Path("/"):
        raise EmulationError(f"mountPath {path}: no existing parent directory below /")
    return str(parent)


def _setup_script(pod: _Pod, attempt: Path) -> str:
    """sh run in the container's fresh mount and UTS namespaces before ``exec "$@"``: overlays
    where a mount point is missing, the volumes, /etc/hosts, a fresh /tmp, the hostname."""
    q = shlex.quote
    lines = ["set -e"]
    mounts = sorted(pod.replica.volume_mounts, key=lambda m: len(m["mountPath"]))
    parents = sorted({_existing_parent(m["mountPath"]) for m in mounts if not _exists(m)})
    existing = _mount_points()
    for i, parent in enumerate(parents):
        layer = attempt / f"overlay-{i}"
        (layer / "upper").mkdir(parents=True)
        (layer / "work").mkdir()
        # Mounts below the parent (Docker's /etc/hosts, ...) would be hidden: carry them over.
        below = [m for m in existing if m.startswith(parent + "/")]
        below = [m for m in below if not any(m.startswith(o + "/") for o in below)]  # rbind: nested
        for j, sub in enumerate(below):
            stash = layer / f"stash-{j}"
            stash.mkdir()
            lines.append(f"mount --rbind {q(sub)} {q(str(stash))}")
        options = f"lowerdir={parent},upperdir={layer / 'upper'},workdir={layer / 'work'}"
        lines.append(f"mount -t overlay overlay -o {q(options)} {q(parent)}")
        lines += [
            f"mount --move {q(str(layer / f'stash-{j}'))} {q(m)}" for j, m in enumerate(below)
        ]
    for mount in mounts:
        target = q(mount["mountPath"])
        source = q(str(pod.volume_dirs[mount["name"]]))
        lines += [f"mkdir -p {target}", f"mount --bind {source} {target}"]
        if mount.get("readOnly"):
            lines.append(f"mount -o remount,bind,ro {target}")
    (attempt / "tmp").mkdir()
    (attempt / "tmp").chmod(0o1777)  # as /tmp is (mkdir's mode is masked)
    lines += [
        f"mount --bind {q(str(pod.root / 'hosts'))} /etc/hosts",
        f"mount --bind {q(str(attempt / 'tmp'))} /tmp",  # last: the sources above may be in /tmp
        f"hostname {q(pod.replica.name)}",
        "cd /",
        'exec "$@"',
    ]
    return "\n".join(lines)


def _exists(mount: Mapping[str, Any]) -> bool:
    return Path(mount["mountPath"]).exists()


def _rewritten(pod: _Pod, pods: Sequence[_Pod]) -> tuple[list[str], dict[str, str]]:
    """Without namespaces: mount paths -> host directories, pod names -> 127.0.0.1."""
    mounts = sorted(pod.replica.volume_mounts, key=lambda m: -len(m["mountPath"]))

    def paths(text: str) -> str:
        for mount in mounts:
            text = text.replace(mount["mountPath"], str(pod.volume_dirs[mount["name"]]))
        return text

    names = {p.replica.name for p in pods}
    env = {k: LOOPBACK if v in names else paths(v) for k, v in pod.replica.env.items()}
    return [paths(a) for a in pod.replica.command], env


class JobRun:
    """The replicas of one PyTorchJob as processes; see :func:`running_pytorchjob`."""

    def __init__(
        self,
        job: Mapping[str, Any],
        pods: Sequence[_Pod],
        *,
        namespaces: bool,
        base_env: Mapping[str, str],
        restart_delay_s: float,
    ) -> None:
        self.job = job
        self.pods = {pod.replica.name: pod for pod in pods}
        self.namespaces = namespaces
        self.base_env = dict(base_env)
        self.restart_delay_s = restart_delay_s
        self.condition: str | None = None
        run_policy = job["spec"]["runPolicy"]
        self.backoff_limit: int | None = run_policy.get("backoffLimit")
        self.clean_pod_policy: str = run_policy["cleanPodPolicy"]

    # -- one container --

    def start(self, name: str) -> None:
        """Start pod ``name``'s container (again): a new attempt with the same environment."""
        pod = self.pods[name]
        if pod.process is not None:
            raise RuntimeError(f"{name} is running")
        pod.attempt += 1
        attempt = pod.attempt_dir()
        attempt.mkdir(parents=True)
        env = {**self.base_env, "HOSTNAME": name, **pod.replica.env}
        if self.namespaces:
            script = _setup_script(pod, attempt)
            # Its own PID namespace too: `ray stop` and friends see only this container, and when
            # the main process (PID 1) ends the kernel kills the rest, as in a container.
            shell = ["unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc"]
            shell += ["--propagation", "private", "--"]
            argv = [*shell, "/bin/sh", "-c", script, "sh", *pod.replica.command]
            if pod.netns is not None:
                argv = ["ip", "netns", "exec", pod.netns, *argv]
            argv[0] = shutil.which(argv[0]) or argv[0]  # PATH below is the container's
        else:
            argv, rewritten = _rewritten(pod, list(self.pods.values()))
            env.update(rewritten)
        with (attempt / "container.log").open("wb") as log:
            pod.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd="/",
                start_new_session=True,  # its own process group: kill() reaches its children
            )

    def kill(self, name: str) -> None:
        """SIGKILL every process of pod ``name``'s container (a lost node, an OOM kill)."""
        pod = self.pods[name]
        if pod.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.process.pid, signal.SIGKILL)
            pod.process.wait()
        self._sweep(pod)

    def restart(self, name: str) -> None:
        """Kill pod ``name``'s container if it runs, and start it again."""
        self.kill(name)
        self.poll()  # records the exit; a restart policy may already have scheduled a start
        pod = self.pods[name]
        if pod.process is None:
            pod.restart_at = None
            self.start(name)

    def _sweep(self, pod: _Pod) -> None:
        """Kill what the container left: the rest of its process group (in namespace mode the
        kernel has killed the rest of its PID namespace with its main process)."""
        if pod.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.process.pid, signal.SIGKILL)

    # -- the controller's loop --

    def poll(self) -> str | None:
        """Observe exits, restart by policy, update the job's condition (returned)."""
        now = time.monotonic()
        for name, pod in self.pods.items():
            if pod.process is not None and pod.process.poll() is not None:
                code = _exit_code(pod.process.returncode)
                self._sweep(pod)
                pod.process = None
                pod.exit_codes.append(code)
                if self.condition is None:
                    if should_restart(pod.replica.restart_policy, code):
                        pod.restart_at = now + self.restart_delay_s
                    elif code != 0:
                        self._finish("Failed")
            if pod.restart_at is not None and pod.restart_at <= now and self.condition is None:
                pod.restart_at = None
                self.start(name)
        if self.condition is None:
            self._update_condition()
        return self.condition

    def _update_condition(self) -> None:
        restarts = sum(self.restarts.values())
        if self.backoff_limit is not None and restarts >= max(self.backoff_limit, 1):
            self._finish("Failed", delete_pods=True)  # PastBackoffLimit deletes every pod
            return
        masters = [p for p in self.pods.values() if p.replica.replica_type == "Master"]
        deciding = masters or list(self.pods.values())
        if all(p.process is None and p.exit_codes[-1:] == [0] for p in deciding):
            self._finish("Succeeded")

    def _finish(self, condition: str, *, delete_pods: bool = False) -> None:
        self.condition = condition
        for pod in self.pods.values():
            pod.restart_at = None
        if delete_pods or self.clean_pod_policy != "None":
            self.stop_all()

    @property
    def restarts(self) -> dict[str, int]:
        return {name: max(pod.attempt - 1, 0) for name, pod in self.pods.items()}

    def running(self, name: str) -> bool:
        return self.pods[name].process is not None

    def address(self, name: str) -> str:
        """Pod ``name``'s IP address (127.0.0.1 on the loopback)."""
        return self.pods[name].address

    def _active(self) -> bool:
        return any(p.process is not None or p.restart_at is not None for p in self.pods.values())

    def _run_until(self, predicate: Callable[[], bool], timeout_s: float, poll_s: float) -> bool:
        """Run the controller until ``predicate()`` (True) or until no container runs or will
        restart (False); TimeoutError with each pod's log tail after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if predicate():
                return True
            if not self._active():
                return False
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout_s:g} s: {self.describe()}")
            time.sleep(poll_s)

    def wait_until(
        self, predicate: Callable[[], bool], *, timeout_s: float, poll_s: float = 0.5
    ) -> None:
        """Run the controller until ``predicate()`` holds; TimeoutError, or RuntimeError when
        every container ended first (both with each pod's log tail)."""
        if not self._run_until(predicate, timeout_s, poll_s):
            raise RuntimeError(f"the job ended first ({self.condition}): {self.describe()}")

    def wait(self, *, timeout_s: float, poll_s: float = 0.5) -> JobResult:
        """Run the controller until no container runs or will restart; TimeoutError (with each
        pod's log tail) after ``timeout_s``."""
        self._run_until(lambda: False, timeout_s, poll_s)
        codes = {name: pod.exit_codes[-1] for name, pod in self.pods.items() if pod.exit_codes}
        return JobResult(self.condition or "Unknown", codes, self.restarts)

    def stop_all(self) -> None:
        """SIGKILL every container (also on exit of :func:`running_pytorchjob`)."""
        for name, pod in self.pods.items():
            pod.restart_at = None
            self.kill(name)
            if pod.process is not None:
                pod.exit_codes.append(_exit_code(pod.process.returncode))
                pod.process = None

    # -- logs --

    def log_path(self, name: str, attempt: int | None = None) -> Path:
        """Container log of ``attempt`` (1-based; default the latest) of pod ``name``."""
        return self.pods[name].attempt_dir(attempt) / "container.log"

    def logs(self, name: str, attempt: int | None = None) -> str:
        path = self.log_path(name, attempt)
        return path.read_text(errors="replace") if path.exists() else ""

    def describe(self, lines: int = 25) -> str:
        out = []
        for name, pod in self.pods.items():
            state = "running" if pod.process is not None else f"exited {pod.exit_codes}"
            tail = "\n    ".join(self.logs(name).splitlines()[-lines:])
            out.append(f"\n--- {name} (attempt {pod.attempt}, {state}):\n    {tail}")
        return "".join(out)


def _hosts(pods: Sequence[_Pod], own: _Pod, namespace: str) -> str:
    lines = [
        "# Kubernetes-managed hosts file (emulated: the pod, and the replica Services).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
    ]
    for pod in sorted(pods, key=lambda p: p is not own):
        name = pod.replica.name
        fqdn = f"{name}.{namespace}.svc.cluster.local"
        lines.append(f"{pod.address}\t{name} {name}.{namespace} {name}.{namespace}.svc {fqdn}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def running_pytorchjob(
    job: Mapping[str, Any],
    network: PodNetwork,
    *,
    root: Path,
    configmaps: Sequence[Mapping[str, Any]] = (),
    secrets: Mapping[str, Mapping[str, str]] | None = None,
    python_bin: Path | None = None,
    image_env: Mapping[str, str] | None = None,
    restart_delay_s: float = 0.0,
    namespaces: bool | None = None,
) -> Iterator[JobRun]:
    """Start every replica of ``job`` on ``network``; kill them all when the block exits.

    ``configmaps`` are ConfigMap objects (their ``data`` is what the pods mount and reference),
    ``secrets`` maps a Secret name to its decoded data, ``python_bin`` is the directory whose
    ``python`` (and other tools) lead the containers' ``PATH`` (default: this interpreter's),
    ``image_env`` the variables an image would set. Pod directories (logs, ``/tmp`` of each
    attempt, volumes) go under ``root``. ``namespaces`` picks how containers are isolated
    (default: namespaces where :func:`namespaces_unavailable` allows, else the path rewrite).
    """
    namespace = job.get("metadata", {}).get("namespace", "default")
    cm_data = {
        cm["metadata"]["name"]: dict(cm.get("data") or {})
        for cm in configmaps
        if cm["metadata"].get("namespace", namespace) == namespace
    }
    names = [r.name for r in replica_envs(job, secrets=secrets, configmaps=cm_data)]
    use_namespaces = namespaces_unavailable() is None if namespaces is None else namespaces
    if network.mode == "netns" and not use_namespaces:
        raise EmulationError("a netns PodNetwork needs the containers' namespaces too")
    placed = network.attach(names)
    try:
        ips = {name: address for name, (_, address) in placed.items()}
        replicas = replica_envs(job, secrets=secrets, configmaps=cm_data, pod_ips=ips)
        pods = [_Pod(r, placed[r.name][0], placed[r.name][1], root / r.name, {}) for r in replicas]
        for pod in pods:
            for volume in pod.replica.volumes:
                dest = pod.root / "volumes" / volume["name"]
                _write_volume(volume, dest, cm_data)
                pod.volume_dirs[volume["name"]] = dest
            pod.root.mkdir(parents=True, exist_ok=True)
            (pod.root / "hosts").write_text(_hosts(pods, pod, namespace), encoding="utf-8")
        bin_dir = python_bin or Path(sys.executable).parent
        base_env = {
            "PATH": f"{bin_dir}:{_SYSTEM_PATH}",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            **(image_env or {}),
        }
        run = JobRun(
            apply_defaults(job),
            pods,
            namespaces=use_namespaces,
            base_env=base_env,
            restart_delay_s=restart_delay_s,
        )
        try:
            for name in names:
                run.start(name)
            yield run
        finally:
            run.stop_all()
    finally:
        if network.mode == "netns":
            errors = network.release([ns for ns, _ in placed.values() if ns])
            if errors:
                raise RuntimeError(f"pod network release: {'; '.join(errors)}")
