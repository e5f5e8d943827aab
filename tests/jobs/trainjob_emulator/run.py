"""Running a TrainJob's JobSet as local processes: the Job controller's per-index restarts and
backoff limit, JobSet's failure policy (restart everything, ``maxRestarts``) and success policy,
and the TrainJob's Complete/Failed condition. The processes, volumes, namespaces and network are
:mod:`tests.jobs.pytorchjob_emulator`'s (:class:`PodRun`, :func:`running_pods`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.jobs.pytorchjob_emulator.controller import EmulationError, Replica
from tests.jobs.pytorchjob_emulator.network import PodNetwork
from tests.jobs.pytorchjob_emulator.pods import (
    PodRun,
    _Pod,
    configmap_data,
    make_volumes,
    running_pods,
)
from tests.jobs.trainjob_emulator.resolve import jobset, pods

#: ``batch/v1`` Job's default ``backoffLimit``.
DEFAULT_BACKOFF_LIMIT: Final = 6


@dataclass(frozen=True)
class TrainJobResult:
    """How the TrainJob ended: ``condition`` ``Complete`` or ``Failed`` (the JobSet's Completed
    or Failed, renamed as the jobset plugin's ``Status`` does) with the JobSet's ``reason``
    (``AllJobsCompleted``, ``FailedJobs``, ``ReachedMaxRestarts``), each pod's last exit code
    and container starts less one, and the JobSet's ``status.restarts``."""

    condition: str
    reason: str
    exit_codes: dict[str, int]
    restarts: dict[str, int]
    jobset_restarts: int


class TrainJobRun(PodRun):
    """The pods of one TrainJob's JobSet as processes; see :func:`running_trainjob`. Pods are
    named by hostname (``<trainjob>-node-0-<index>``)."""

    def __init__(
        self,
        js: Mapping[str, Any],
        resolve: Callable[[int], Sequence[Replica]],
        configmaps: Mapping[str, Mapping[str, str]],
        pods_: Sequence[_Pod],
        **kwargs: Any,
    ) -> None:
        super().__init__(pods_, **kwargs)
        self.js = js
        self.resolve = resolve  # JobSet restarts -> the pods of that attempt
        self.configmaps = configmaps
        self.reason = ""
        self.jobset_restarts = 0
        self.counted_restarts = 0  # RestartsCountTowardsMax
        policy = js["spec"].get("failurePolicy")
        if policy and policy.get("rules"):
            raise EmulationError("spec.failurePolicy.rules are not emulated")
        self.max_restarts: int | None = None if policy is None else int(policy["maxRestarts"])
        jobs = {}
        for rjob in js["spec"]["replicatedJobs"]:
            if rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] not in (
                "OnFailure",
                "Never",
            ):  # batch/v1 validation
                raise EmulationError(f"{rjob['name']}: a Job's restartPolicy: OnFailure or Never")
            limit = rjob["template"]["spec"].get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
            for job_index in range(int(rjob["replicas"])):
                jobs[f"{js['metadata']['name']}-{rjob['name']}-{job_index}"] = int(limit)
        self.backoff_limits = jobs  # Job name -> backoffLimit
        self._failures = dict.fromkeys(jobs, 0)  # this JobSet attempt's failed pods/restarts

    def _job_of(self, pod: _Pod) -> str:
        return pod.replica.name.rsplit("-", 1)[0]

    def _exited(self, pod: _Pod, code: int, now: float) -> None:
        if code == 0:
            return  # the index completed
        job = self._job_of(pod)
        self._failures[job] += 1
        limit = self.backoff_limits[job]
        # OnFailure: pastBackoffLimitOnFailure (restarts >= limit, > 0 for a limit of 0);
        # Never: the Job's failed pods > limit.
        if pod.replica.restart_policy == "OnFailure":
            failed = self._failures[job] >= max(limit, 1) if limit else True
        else:
            failed = self._failures[job] > limit
        if failed:
            self._job_failed()
            return
        if pod.replica.restart_policy == "Never":  # a new pod for the index: fresh emptyDirs
            make_volumes(pod, self.configmaps)
        pod.restart_at = now + self.restart_delay_s

    def _job_failed(self) -> None:
        """A child Job failed: JobSet's failure policy (``executeFailurePolicy``): without one
        the JobSet fails; with one it restarts every Job until ``maxRestarts``."""
        if self.max_restarts is None:
            self._finish("Failed", "FailedJobs")
        elif self.counted_restarts >= self.max_restarts:
            self._finish("Failed", "ReachedMaxRestarts")
        else:
            self._recreate_all()

    def _recreate_all(self) -> None:
        """``failurePolicyRecreateAll``: every Job (and pod) deleted and created again with the
        next ``jobset.sigs.k8s.io/restart-attempt``; the pods keep their addresses here."""
        for name in self.pods:
            self._delete(name)
        self.jobset_restarts += 1
        self.counted_restarts += 1
        self._failures = dict.fromkeys(self._failures, 0)
        for replica in self.resolve(self.jobset_restarts):
            pod = self.pods[replica.name]
            pod.replica = replica
            make_volumes(pod, self.configmaps)
            self.start(replica.name)

    def _update_condition(self) -> None:
        """``numJobsMatchingSuccessPolicy``: the JobSet completes once the Jobs the success policy
        targets succeeded (every index exited 0): all of them (``All``) or one (``Any``)."""
        policy = self.js["spec"]["successPolicy"]
        targets = policy.get("targetReplicatedJobs") or [
            r["name"] for r in self.js["spec"]["replicatedJobs"]
        ]
        succeeded: dict[str, bool] = {}
        for pod in self.pods.values():
            if pod.replica.replica_type in targets:
                done = pod.process is None and pod.restart_at is None
                ok = done and pod.exit_codes[-1:] == [0]
                job = self._job_of(pod)
                succeeded[job] = succeeded.get(job, True) and ok
        if (any if policy["operator"] == "Any" else all)(succeeded.values()):
            self._finish("Complete", "AllJobsCompleted")

    def _finish(self, condition: str, reason: str) -> None:
        """The TrainJob's end; pods still running are deleted (a failed Job's by the Job
        controller; a finished JobSet's active Jobs by JobSet)."""
        self.condition, self.reason = condition, reason
        for name in self.pods:
            self._delete(name)

    def wait(self, *, timeout_s: float, poll_s: float = 0.5) -> TrainJobResult:
        """Run the controllers until no container runs or will restart; TimeoutError (with each
        pod's log tail) after ``timeout_s``."""
        self._run_until(lambda: False, timeout_s, poll_s)
        codes = {name: pod.exit_codes[-1] for name, pod in self.pods.items() if pod.exit_codes}
        return TrainJobResult(
            self.condition or "Unknown", self.reason, codes, self.restarts, self.jobset_restarts
        )


@contextlib.contextmanager
def running_trainjob(
    trainjob: Mapping[str, Any],
    runtime: Mapping[str, Any],
    network: PodNetwork,
    *,
    root: Path,
    configmaps: Sequence[Mapping[str, Any]] = (),
    secrets: Mapping[str, Mapping[str, str]] | None = None,
    python_bin: Path | None = None,
    image_env: Mapping[str, str] | None = None,
    restart_delay_s: float = 0.0,
    namespaces: bool | None = None,
) -> Iterator[TrainJobRun]:
    """Start every pod of ``trainjob`` (run against the ClusterTrainingRuntime ``runtime``) on
    ``network``; kill them all when the block exits. The other arguments are
    :func:`~tests.jobs.pytorchjob_emulator.running_pytorchjob`'s."""
    js = jobset(trainjob, runtime)
    namespace = js["metadata"]["namespace"]
    cm_data = configmap_data(configmaps, namespace)
    names = [r.name for r in pods(js, secrets=secrets, configmaps=cm_data)]
    ips: dict[str, str] = {}

    def resolve(restarts: int) -> list[Replica]:
        return pods(js, restarts=restarts, secrets=secrets, configmaps=cm_data, pod_ips=ips)

    def placed(pod_ips: Mapping[str, str]) -> list[Replica]:
        ips.update(pod_ips)
        return resolve(0)

    with running_pods(
        names,
        placed,
        lambda pods_, **options: TrainJobRun(js, resolve, cm_data, pods_, **options),
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
