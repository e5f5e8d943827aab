"""The backoff-limit trap of multi-node PyTorchJobs, reproduced from upstream's rules, and the
operator's mitigation (:func:`sarl_operator.scheduling.master_wait_container`).

Upstream, kubeflow/training-operator tag ``v1.9.0``:

* ``pkg/controller.v1/pytorch/initcontainer.go``: every Worker of a job with a Master gets an
  init container ``init-pytorch`` *appended* to its template's init containers, running
  ``for i in $(seq 100); do nslookup <job>-master-0 && exit 0; sleep 2; done; exit 1``
  (``--pytorch-init-container-max-tries``, default 100, ``pkg/config/config.go``). The Master's
  headless Service resolves only once the Master pod is ready, so each attempt fails after
  >= 200 s while the Master is Pending, and the kubelet restarts it (pod restartPolicy
  OnFailure) after its crash-loop back-off: 10 s, doubling, at most 300 s (kubelet
  ``MaxContainerBackOff``).
* ``pkg/core/job.go`` ``PastBackoffLimit``: the job fails once the sum of ``restartCount`` of
  the init containers and containers of its pods *in phase Running* reaches
  ``runPolicy.backoffLimit``. A Worker in its init containers is Pending, so its failed lookups
  are not counted while the Master waits — and all of them are counted the moment the Master is
  ready and the Worker starts running.

No cluster runs here: the arithmetic of those rules is applied to the PyTorchJob the operator
builds, for the ways a Master can be Pending while a Worker's init container runs.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from sarl_operator import builders, scheduling
from tests.operators.cases import (
    CASES,
    IMAGE,
    NAMESPACE,
    PLATFORM,
    RUN_ID,
    TRACKING_URI,
    experiment_of,
)

#: initcontainer.go: the Training Operator's init container, appended after the template's.
OPERATOR_INIT: Final = "init-pytorch"
ATTEMPT_S: Final = 100 * 2  # max tries x sleep: the least time one failed attempt takes
BACKOFF_S: Final = (10, 300)  # the kubelet's first and largest restart delay
MINUTE: Final = 60


def failures_within(wait_s: float) -> int:
    """Failed (and restarted) attempts of ``init-pytorch`` while the Master is not resolvable
    for ``wait_s`` seconds: attempt k ends ATTEMPT_S after it started; the next starts after
    the back-off min(10 * 2**k, 300)."""
    failures, t = 0, 0.0
    while t + ATTEMPT_S <= wait_s:
        t += ATTEMPT_S + min(BACKOFF_S[0] * 2**failures, BACKOFF_S[1])
        failures += 1
    return failures


def worker_restarts(worker_pod: dict[str, Any], master_pending_s: float) -> int:
    """restartCount summed over the Worker's init containers (the template's, then the
    operator's) once it runs, the Master having been Pending ``master_pending_s`` after the
    Worker was bound. sarl's ``wait-for-master`` never fails: it ends when the Master
    resolves, after which ``init-pytorch`` succeeds at its first lookup."""
    names = [c["name"] for c in worker_pod.get("initContainers") or []] + [OPERATOR_INIT]
    restarts, unresolved_s = 0, master_pending_s
    for name in names:
        if name == scheduling.MASTER_WAIT_CONTAINER:
            unresolved_s = 0.0
        elif name == OPERATOR_INIT:
            restarts += failures_within(unresolved_s)
    return restarts


def past_backoff_limit(backoff_limit: int, running_restarts: list[int]) -> bool:
    """pkg/core/job.go ``PastBackoffLimit`` over the pods in phase Running."""
    total = sum(running_restarts)
    return total > 0 if backoff_limit == 0 else total >= backoff_limit


def _job(nodes: int) -> dict[str, Any]:
    doc = CASES["sarl-grpo-math-2node"]()
    doc["spec"]["resources"]["nodes"] = nodes
    return builders.pytorchjob(
        experiment_of(doc), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI, platform=PLATFORM,
    )  # fmt: skip


def _without_mitigation(pod: dict[str, Any]) -> dict[str, Any]:
    inits = [c for c in pod.get("initContainers") or [] if c["name"] != "wait-for-master"]
    return {**pod, "initContainers": inits}


def test_the_rule_counts_each_failed_lookup_round() -> None:
    # 200 s per round, then 10, 20, 40, 80, 160, 300 s back-off.
    # The 6th failure ends at 200 + (10 + 200) + (20 + 200) + ... + (160 + 200) = 1510 s.
    assert [failures_within(s) for s in (199, 200, 409, 410, 629, 1509, 1510)] == [
        0, 1, 1, 2, 2, 5, 6,
    ]  # fmt: skip


#: How long the Master can be Pending after a Worker was bound, per scheduling setup:
#: without a gang, until GPUs free up (unbounded; 30 min here); with Kueue alone, until its
#: waitForPodsReady timeout evicts the job (v0.19.2 default 30 min,
#: apis/config/v1beta2/defaults.go) — admission reserves quota, not nodes; with a gang
#: scheduler every pod is bound together, and the Master is Pending only for its image pull
#: (a ~20 GB trainer image: 10 min on a cold node).
SCENARIOS: Final = [
    ("no gang, no Kueue", 30 * MINUTE),
    ("Kueue (waitForPodsReady)", 30 * MINUTE),
    ("gang scheduler (image pull)", 10 * MINUTE),
]


@pytest.mark.parametrize("nodes", [2, 4])
@pytest.mark.parametrize(("setup", "pending_s"), SCENARIOS, ids=[s for s, _ in SCENARIOS])
def test_the_workers_restart_count_stays_zero_with_the_wait_container(
    nodes: int, setup: str, pending_s: float
) -> None:
    job = _job(nodes)
    limit = job["spec"]["runPolicy"]["backoffLimit"]
    assert limit == builders.RESTARTS * nodes
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    pod = worker["template"]["spec"]
    assert pod["initContainers"][0]["name"] == scheduling.MASTER_WAIT_CONTAINER
    # Every Worker waited the same; the Master has no init container.
    with_wait = [worker_restarts(pod, pending_s)] * worker["replicas"]
    assert with_wait == [0] * (nodes - 1)
    assert not past_backoff_limit(limit, [0, *with_wait])
    # Without it, every Worker arrives with its failed rounds, all counted at once.
    bare = [worker_restarts(_without_mitigation(pod), pending_s)] * worker["replicas"]
    assert bare[0] == failures_within(pending_s) > 0


def test_without_the_wait_container_a_2_node_job_fails_as_it_starts() -> None:
    """The trap: a Master Pending 30 min for GPUs (or until Kueue's PodsReady timeout) brings
    the Worker in with 6 restarts = backoffLimit 3 x 2: Failed before a step ran."""
    job = _job(2)
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    restarts = worker_restarts(_without_mitigation(pod), 30 * MINUTE)
    assert past_backoff_limit(job["spec"]["runPolicy"]["backoffLimit"], [0, restarts])
    assert not past_backoff_limit(job["spec"]["runPolicy"]["backoffLimit"], [0, 0])


def test_the_master_has_no_wait_container() -> None:
    """The Master is what the Workers wait for; it has no init container of its own (the
    Training Operator adds none to it, initcontainer.go)."""
    master = _job(2)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert "initContainers" not in master
