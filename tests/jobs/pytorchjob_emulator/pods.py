"""Running a job's pods as local processes: volumes, hosts files, private mount, UTS and PID
namespaces, and cleanup (:class:`PodRun`, :func:`running_pods`, shared with
:mod:`tests.jobs.trainjob_emulator`), and the PyTorchJob controller's restarts and end
(:class:`JobRun`, :func:`running_pytorchjob`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from tests.jobs.pytorchjob_emulator.controller import (
    LOOPBACK,
    ContainerConfigError,
    EmulationError,
    Replica,
    apply_defaults,
    deleted_when_finished,
    replica_envs,
    should_restart,
)
from tests.jobs.pytorchjob_emulator.network import (
    PodNetwork,
    namespaces_unavailable,
)

_SYSTEM_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
    #: Pods still running when the job ended that ``cleanPodPolicy`` deleted (their exit code is
    #: the kill's, 137): a worker tearing down after the master succeeded, for one.
    deleted_running: frozenset[str] = frozenset()


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
    fresh_tmp = attempt / "tmp"
    fresh_tmp.mkdir()
    fresh_tmp.chmod(0o1777)  # as /tmp is (mkdir's mode is masked)
    # What the container runs from (this checkout, its venv) may itself be under /tmp (a CI
    # clone in /tmp): bind it into the fresh /tmp at the same place, as an image would carry it.
    for path in host_paths_under_tmp():
        inside = fresh_tmp / Path(path).relative_to("/tmp")
        inside.mkdir(parents=True, exist_ok=True)
        lines.append(f"mount --rbind {q(path)} {q(str(inside))}")
    lines += [
        f"mount --bind {q(str(pod.root / 'hosts'))} /etc/hosts",
        # Last: the sources above may be in /tmp. rbind: it carries the checkout's mount.
        f"mount --rbind {q(str(fresh_tmp))} /tmp",
        f"hostname {q(pod.replica.host)}",
        "cd /",
        'exec "$@"',
    ]
    return "\n".join(lines)


def host_paths_under_tmp() -> list[str]:
    """This checkout and the interpreter's prefix (the venv), where they lie below /tmp;
    nested ones are left out (their parent carries them)."""
    repo = Path(__file__).resolve().parents[3]
    found = sorted({str(p) for p in (repo, Path(sys.prefix).resolve()) if p.is_relative_to("/tmp")})
    return [p for p in found if not any(p.startswith(o + "/") for o in found if o != p)]


def _exists(mount: Mapping[str, Any]) -> bool:
    return Path(mount["mountPath"]).exists()


def _rewritten(pod: _Pod, pods: Sequence[_Pod], namespace: str) -> tuple[list[str], dict[str, str]]:
    """Without namespaces: mount paths -> host directories, pod names -> 127.0.0.1."""
    mounts = sorted(pod.replica.volume_mounts, key=lambda m: -len(m["mountPath"]))

    def paths(text: str) -> str:
        for mount in mounts:
            text = text.replace(mount["mountPath"], str(pod.volume_dirs[mount["name"]]))
        return text

    names = {name for p in pods for name in dns_names(p.replica, namespace)}
    env = {k: LOOPBACK if v in names else paths(v) for k, v in pod.replica.env.items()}
    return [paths(a) for a in pod.replica.command], env


class PodRun:
    """A job's pods as processes, and the loop that observes them: the kubelet's part. The
    controller's part (what an exit means, when the job ends) is a subclass's :meth:`_exited`
    and :meth:`_update_condition`."""

    def __init__(
        self,
        pods: Sequence[_Pod],
        *,
        namespace: str,
        namespaces: bool,
        base_env: Mapping[str, str],
        restart_delay_s: float,
    ) -> None:
        self.pods = {pod.replica.name: pod for pod in pods}
        self.namespace = namespace
        self.namespaces = namespaces
        self.base_env = dict(base_env)
        self.restart_delay_s = restart_delay_s
        self.condition: str | None = None

    # -- one container --

    def start(self, name: str) -> None:
        """Start pod ``name``'s container (again): a new attempt with the same environment."""
        pod = self.pods[name]
        if pod.process is not None:
            raise RuntimeError(f"{name} is running")
        pod.attempt += 1
        attempt = pod.attempt_dir()
        attempt.mkdir(parents=True)
        env = {**self.base_env, "HOSTNAME": pod.replica.host, **pod.replica.env}
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
            argv, rewritten = _rewritten(pod, list(self.pods.values()), self.namespace)
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
                    self._exited(pod, code, now)
            if pod.restart_at is not None and pod.restart_at <= now and self.condition is None:
                pod.restart_at = None
                self.start(name)
        if self.condition is None:
            self._update_condition()
        return self.condition

    def _exited(self, pod: _Pod, code: int, now: float) -> None:
        """Pod ``pod``'s container exited with ``code`` while the job runs."""
        raise NotImplementedError

    def _update_condition(self) -> None:
        """Set :attr:`condition` once the job has ended."""
        raise NotImplementedError

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

    def stop_all(self) -> None:
        """SIGKILL every container (also on exit of :func:`running_pods`)."""
        for name in self.pods:
            self._delete(name)

    def _delete(self, name: str) -> None:
        pod = self.pods[name]
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


class JobRun(PodRun):
    """The replicas of one PyTorchJob as processes; see :func:`running_pytorchjob`."""

    def __init__(self, job: Mapping[str, Any], pods: Sequence[_Pod], **kwargs: Any) -> None:
        super().__init__(pods, **kwargs)
        self.job = job
        self.deleted_running: set[str] = set()
        run_policy = job["spec"]["runPolicy"]
        self.backoff_limit: int | None = run_policy.get("backoffLimit")
        self.clean_pod_policy: str = run_policy["cleanPodPolicy"]

    def _exited(self, pod: _Pod, code: int, now: float) -> None:
        if should_restart(pod.replica.restart_policy, code):
            pod.restart_at = now + self.restart_delay_s
        elif code != 0:
            self._finish("Failed")

    def _update_condition(self) -> None:
        restarts = sum(self.restarts.values())
        if self.backoff_limit is not None and restarts >= max(self.backoff_limit, 1):
            self._finish("Failed")  # PastBackoffLimit
            return
        masters = [p for p in self.pods.values() if p.replica.replica_type == "Master"]
        deciding = masters or list(self.pods.values())
        if all(p.process is None and p.exit_codes[-1:] == [0] for p in deciding):
            self._finish("Succeeded")

    def _finish(self, condition: str) -> None:
        """The job's end: pods deleted by ``cleanPodPolicy`` as v1.9.4 does (a kept pod that
        still runs goes on running, holding its resources)."""
        self.condition = condition
        for name, pod in self.pods.items():
            active = pod.process is not None or pod.restart_at is not None
            phase = "Running" if active else "Succeeded" if pod.exit_codes[-1:] == [0] else "Failed"
            pod.restart_at = None
            if deleted_when_finished(self.clean_pod_policy, phase):
                if phase == "Running":
                    self.deleted_running.add(name)
                self._delete(name)

    def wait(self, *, timeout_s: float, poll_s: float = 0.5) -> JobResult:
        """Run the controller until no container runs or will restart; TimeoutError (with each
        pod's log tail) after ``timeout_s``."""
        self._run_until(lambda: False, timeout_s, poll_s)
        codes = {name: pod.exit_codes[-1] for name, pod in self.pods.items() if pod.exit_codes}
        return JobResult(
            self.condition or "Unknown", codes, self.restarts, frozenset(self.deleted_running)
        )


def dns_names(replica: Replica, namespace: str) -> list[str]:
    """The names another pod reaches ``replica`` by: its Service's (the PyTorchJob's replicas) or,
    with a subdomain, its hostname's in the headless Service (a bare hostname of another pod
    does not resolve: the DNS search path appends ``<namespace>.svc.cluster.local``)."""
    if replica.subdomain is None:
        base = replica.name
        return [base, f"{base}.{namespace}", f"{base}.{namespace}.svc", _fqdn(base, namespace)]
    base = f"{replica.host}.{replica.subdomain}"
    return [_fqdn(base, namespace), base, f"{base}.{namespace}", f"{base}.{namespace}.svc"]


def _fqdn(name: str, namespace: str) -> str:
    return f"{name}.{namespace}.svc.cluster.local"


def _hosts(pods: Sequence[_Pod], own: _Pod, namespace: str) -> str:
    """The pod's /etc/hosts: the kubelet's (localhost; the pod's own hostname, with its FQDN when
    it has a subdomain), then the other pods' DNS names (cluster DNS, emulated)."""
    lines = [
        "# Kubernetes-managed hosts file (emulated: the pod, and the other pods' DNS names).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
    ]
    for pod in sorted(pods, key=lambda p: p is not own):
        names = dns_names(pod.replica, namespace)
        if pod is own and pod.replica.subdomain is not None:
            names = [names[0], pod.replica.host, *names[1:]]
        lines.append(f"{pod.address}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"


def make_volumes(pod: _Pod, configmaps: Mapping[str, Mapping[str, str]]) -> None:
    """Write pod ``pod``'s volumes afresh (a new pod's emptyDirs are empty) and its hosts file."""
    volumes = pod.root / "volumes"
    if volumes.exists():
        shutil.rmtree(volumes)
    for volume in pod.replica.volumes:
        dest = volumes / volume["name"]
        _write_volume(volume, dest, configmaps)
        pod.volume_dirs[volume["name"]] = dest


Run = TypeVar("Run", bound=PodRun)


@contextlib.contextmanager
def running_pods(
    names: Sequence[str],
    resolve: Callable[[Mapping[str, str]], Sequence[Replica]],
    make_run: Callable[..., Run],
    network: PodNetwork,
    *,
    namespace: str,
    root: Path,
    configmaps: Mapping[str, Mapping[str, str]],
    python_bin: Path | None = None,
    image_env: Mapping[str, str] | None = None,
    restart_delay_s: float = 0.0,
    namespaces: bool | None = None,
) -> Iterator[Run]:
    """Start pods ``names`` on ``network``; kill them all when the block exits. ``resolve``
    gives each pod (in the order of ``names``) from the pods' IP addresses; ``make_run(pods,
    **options)`` is the controller. ``configmaps`` maps a ConfigMap's name to its data; the
    other arguments are :func:`running_pytorchjob`'s."""
    use_namespaces = namespaces_unavailable() is None if namespaces is None else namespaces
    if network.mode == "netns" and not use_namespaces:
        raise EmulationError("a netns PodNetwork needs the containers' namespaces too")
    placed = network.attach(names)
    try:
        ips = {name: address for name, (_, address) in placed.items()}
        pods = [_Pod(r, *placed[r.name], root / r.name, {}) for r in resolve(ips)]
        for pod in pods:
            make_volumes(pod, configmaps)
            pod.root.mkdir(parents=True, exist_ok=True)
            (pod.root / "hosts").write_text(_hosts(pods, pod, namespace), encoding="utf-8")
        bin_dir = python_bin or Path(sys.executable).parent
        base_env = {
            "PATH": f"{bin_dir}:{_SYSTEM_PATH}",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            **(image_env or {}),
        }
        run = make_run(
            pods,
            namespace=namespace,
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


def configmap_data(
    configmaps: Sequence[Mapping[str, Any]], namespace: str
) -> dict[str, dict[str, str]]:
    """ConfigMap objects of ``namespace`` by name: their ``data``."""
    return {
        cm["metadata"]["name"]: dict(cm.get("data") or {})
        for cm in configmaps
        if cm["metadata"].get("namespace", namespace) == namespace
    }


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
    cm_data = configmap_data(configmaps, namespace)
    names = [r.name for r in replica_envs(job, secrets=secrets, configmaps=cm_data)]
    defaulted = apply_defaults(job)
    with running_pods(
        names,
        lambda ips: replica_envs(job, secrets=secrets, configmaps=cm_data, pod_ips=ips),
        lambda pods, **options: JobRun(defaulted, pods, **options),
        network,
        namespace=namespace,
        root=root,
        configmaps=cm_data,
        python_bin=python_bin,
        image_env=image_env,
        restart_delay_s=restart_delay_s,
        namespaces=namespaces,
    ) as run:
        yield run
