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
  the job fails once the restarts reach ``runPolicy.backoffLimit``, and succeeds when the
  Master (or, without one, every Worker) exits 0;
* which pods a finished job deletes, as at tag ``v1.9.4`` (``pkg/controller.v1/common/job.go``
  ``DeletePodsAndServices``, :func:`deleted_when_finished`): ``cleanPodPolicy`` None keeps every
  pod — also after the backoff limit, where v1.9.0 deleted them all —, Running deletes the
  running ones, All every one.

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
``subPath`` and mount paths below ``/tmp`` (all refused), the workers' init containers (the
Training Operator's and sarl's ``wait-for-master``: they wait until the master's name resolves,
which here it does from the start), Service environment
variables, cluster DNS (names resolve from the pods' /etc/hosts only, and the pods reach no DNS
server: Ray's bundled gRPC client, c-ares, then fails to resolve them unless ``image_env`` sets
``GRPC_DNS_RESOLVER=native``), the kubelet's CrashLoopBackOff delay (``restart_delay_s``, 0 by
default), restarts after the job has finished (the kubelet would go on restarting a failing
container of a pod that ``cleanPodPolicy: None`` keeps), and pods re-created on another node.
Every process of a replica is killed on exit (its process group; in namespace mode its PID
namespace dies with it); namespaces, veths and the bridge are removed even when the test fails.
"""

from __future__ import annotations

from tests.jobs.pytorchjob_emulator.controller import (
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
    netns_unavailable,
    pod_network,
)
from tests.jobs.pytorchjob_emulator.pods import JobResult, JobRun, running_pytorchjob

__all__ = [
    "ContainerConfigError",
    "EmulationError",
    "JobResult",
    "JobRun",
    "PodNetwork",
    "Replica",
    "apply_defaults",
    "deleted_when_finished",
    "namespaces_unavailable",
    "netns_unavailable",
    "pod_network",
    "replica_envs",
    "running_pytorchjob",
    "should_restart",
]
