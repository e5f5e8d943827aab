"""The Pod Security Standard ``restricted`` (baseline included) as the API server's
pod-security-admission applies it to a pod spec: the one implementation the operator's and the
charts' pod-security tests apply to every pod template they build or render.

Followed, not copied or run: ``policy/check_*.go`` of github.com/kubernetes/pod-security-admission
at tag v0.31.0 (Kubernetes 1.31), each check named after its file below. ``violations`` returns
one line per failed check, worded like the admission's ``ForbiddenReason`` (empty: the pod is
admitted in a namespace labelled ``pod-security.kubernetes.io/enforce: restricted``). Not
emulated: the relaxations for user-namespaced pods (``hostUsers: false``) and Windows pods, which
no sarl pod uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

#: check_capabilities_baseline.go: what baseline lets a container add.
_BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip
#: check_restrictedVolumes.go: the only inline volume sources restricted allows.
_ALLOWED_VOLUMES: Final = frozenset(
    {
        "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
        "projected", "secret",
    }
)  # fmt: skip
#: check_sysctls.go (1.29+ set).
_SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)  # fmt: skip
#: check_seLinuxOptions.go (selinuxAllowedTypes1_31).
_SELINUX_TYPES: Final = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
_SECCOMP_OK: Final = frozenset({"RuntimeDefault", "Localhost"})
_APPARMOR_ANNOTATION: Final = "container.apparmor.security.beta.kubernetes.io/"


def _containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """visitor.go ``visitContainers``: init, regular, then ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or []


def _ctx(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("securityContext") or {}


def _host_namespaces(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]


def _privileged(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        f"container {c['name']!r} privileged" for c in _containers(pod) if _ctx(c).get("privileged")
    ]


def _capabilities_baseline(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    out = []
    for c in _containers(pod):
        added = set((_ctx(c).get("capabilities") or {}).get("add") or [])
        if added - _BASELINE_CAPABILITIES:
            out.append(f"container {c['name']!r} adds {sorted(added - _BASELINE_CAPABILITIES)}")
    return out


def _host_path_volumes(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        f"volume {v['name']!r} is hostPath" for v in pod.get("volumes") or [] if "hostPath" in v
    ]


def _host_ports(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        f"container {c['name']!r} hostPort {p['hostPort']}"
        for c in _containers(pod)
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]


def _app_armor(pod: Mapping[str, Any], meta: Mapping[str, Any]) -> list[str]:
    out = []
    for owner in [pod, *_containers(pod)]:
        kind = (_ctx(owner).get("appArmorProfile") or {}).get("type")
        if kind not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"appArmorProfile {kind}")
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith(_APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"annotation {key}={value}")
    return out


def _se_linux(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    out = []
    for owner in [pod, *_containers(pod)]:
        opts = _ctx(owner).get("seLinuxOptions") or {}
        if opts.get("type", "") not in _SELINUX_TYPES or opts.get("user") or opts.get("role"):
            out.append(f"seLinuxOptions {opts}")
    return out


def _proc_mount(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        f"container {c['name']!r} procMount {_ctx(c)['procMount']}"
        for c in _containers(pod)
        if _ctx(c).get("procMount") not in (None, "Default")
    ]


def _seccomp_baseline(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        "seccompProfile Unconfined"
        for owner in [pod, *_containers(pod)]
        if (_ctx(owner).get("seccompProfile") or {}).get("type") == "Unconfined"
    ]


def _sysctls(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    names = [s["name"] for s in _ctx(pod).get("sysctls") or []]
    return [f"sysctl {n}" for n in names if n not in _SAFE_SYSCTLS]


def _windows_host_process(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        "windowsOptions.hostProcess"
        for owner in [pod, *_containers(pod)]
        if (_ctx(owner).get("windowsOptions") or {}).get("hostProcess")
    ]


def _restricted_volumes(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    out = []
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if kinds - _ALLOWED_VOLUMES:
            out.append(f"volume {volume['name']!r} of type {sorted(kinds - _ALLOWED_VOLUMES)}")
    return out


def _allow_privilege_escalation(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        f"container {c['name']!r} must set securityContext.allowPrivilegeEscalation=false"
        for c in _containers(pod)
        if _ctx(c).get("allowPrivilegeEscalation") is not False
    ]


def _pod_or_every_container(
    pod: Mapping[str, Any], field: str, ok: Callable[[Any], bool]
) -> list[str]:
    """check_runAsNonRoot.go / check_seccompProfile_restricted.go: a bad value anywhere fails;
    a container without the field passes only if the pod sets a good one."""
    pod_value = _ctx(pod).get(field)
    out = [] if pod_value is None or ok(pod_value) else [f"pod {field}={pod_value}"]
    for c in _containers(pod):
        value = _ctx(c).get(field)
        if value is None and (pod_value is None or not ok(pod_value)):
            out.append(f"pod or container {c['name']!r} must set securityContext.{field}")
        elif value is not None and not ok(value):
            out.append(f"container {c['name']!r} {field}={value}")
    return out


def _run_as_non_root(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return _pod_or_every_container(pod, "runAsNonRoot", lambda v: v is True)


def _run_as_user(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return [
        "runAsUser=0" for owner in [pod, *_containers(pod)] if _ctx(owner).get("runAsUser") == 0
    ]


def _seccomp_restricted(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    return _pod_or_every_container(
        pod, "seccompProfile", lambda v: (v or {}).get("type") in _SECCOMP_OK
    )


def _capabilities_restricted(pod: Mapping[str, Any], _: Mapping[str, Any]) -> list[str]:
    out = []
    for c in _containers(pod):
        caps = _ctx(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"container {c['name']!r} must set securityContext.capabilities.drop=[ALL]")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"container {c['name']!r} adds {caps['add']}")
    return out


#: Check id (the upstream file's ``ID``) -> the check.
CHECKS: Final[Mapping[str, Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]]]] = {
    "hostNamespaces": _host_namespaces,
    "privileged": _privileged,
    "capabilities_baseline": _capabilities_baseline,
    "hostPathVolumes": _host_path_volumes,
    "hostPorts": _host_ports,
    "appArmorProfile": _app_armor,
    "seLinuxOptions": _se_linux,
    "procMount": _proc_mount,
    "seccompProfile_baseline": _seccomp_baseline,
    "sysctls": _sysctls,
    "windowsHostProcess": _windows_host_process,
    "restrictedVolumes": _restricted_volumes,
    "allowPrivilegeEscalation": _allow_privilege_escalation,
    "runAsNonRoot": _run_as_non_root,
    "runAsUser": _run_as_user,
    "seccompProfile_restricted": _seccomp_restricted,
    "capabilities_restricted": _capabilities_restricted,
}


def violations(pod: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> list[str]:
    """Every ``restricted`` check ``pod`` (a PodSpec as a dict; ``metadata`` its pod template's
    metadata, for the AppArmor annotations) fails, as ``"<check>: <detail>"``."""
    meta = metadata or {}
    return [
        f"{check_id}: {line}" for check_id, check in CHECKS.items() for line in check(pod, meta)
    ]


def pod_templates(
    obj: Mapping[str, Any],
) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """(where, pod spec, pod metadata) of each pod template in a workload object: a Pod,
    Deployment/StatefulSet/DaemonSet/Job/ReplicaSet (``spec.template``), CronJob, PyTorchJob
    (``pytorchReplicaSpecs``), JobSet-based runtimes (``replicatedJobs``)."""
    kind = obj.get("kind", "")
    spec = obj.get("spec") or {}
    name = f"{kind}/{(obj.get('metadata') or {}).get('name', '')}"
    if kind == "Pod":
        yield name, spec, obj.get("metadata") or {}
    elif (
        "template" in spec
        and "spec" in (spec["template"] or {})
        and kind != "ClusterTrainingRuntime"
    ):
        yield name, spec["template"]["spec"], spec["template"].get("metadata") or {}
    elif kind == "CronJob":
        template = spec["jobTemplate"]["spec"]["template"]
        yield name, template["spec"], template.get("metadata") or {}
    elif kind == "PyTorchJob":
        for replica, rspec in spec["pytorchReplicaSpecs"].items():
            yield (
                f"{name}/{replica}",
                rspec["template"]["spec"],
                rspec["template"].get("metadata") or {},
            )
    elif kind in ("ClusterTrainingRuntime", "TrainingRuntime", "JobSet"):
        jobset = spec["template"]["spec"] if "template" in spec else spec
        for rjob in jobset.get("replicatedJobs") or []:
            template = rjob["template"]["spec"]["template"]
            yield f"{name}/{rjob['name']}", template["spec"], template.get("metadata") or {}
