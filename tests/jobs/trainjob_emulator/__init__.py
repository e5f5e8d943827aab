"""Kubeflow Trainer v2.3.0 emulation: a TrainJob's JobSet pods as local processes.

Used by ``test_trl_trainjob.py`` and ``test_verl_trainjob.py`` to run the TrainJob that
``sarl_operator.trainjob.trainjob`` builds against the ``sarl-torch-distributed``
ClusterTrainingRuntime, one process per pod, on this machine's CPU; ``test_trainjob_emulator.py``
checks it against the upstream behaviour.

What it reproduces, read from kubeflow/trainer at tag ``v2.3.0``:

* the webhook's checks it relies on (``pkg/runtime/framework/plugins/torch/torch.go`` and
  ``plugins/jobset/jobset.go``, ``Validate``): no ``PET_*`` variable in ``spec.trainer.env``, no
  env for the ``node`` container in ``spec.runtimePatches``, a domain-prefixed ``manager``;
* the runtime template merged with ``spec.runtimePatches`` (``pkg/runtime/core/
  trainingruntime.go``, ``newRuntimeInfo`` and ``mergeRuntimePatches``: a strategic merge patch
  of the JobSet spec, replicated jobs and containers by name, volumeMounts by mountPath; the
  patches' template labels and annotations become the JobSet's), ``resourcesPerNode`` merged into
  the ``node`` container's resources;
* the trainer replicated job (label ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``):
  ``replicas`` 1, ``parallelism`` = ``completions`` = ``trainer.numNodes`` (else
  ``mlPolicy.numNodes``), and on its container named ``node`` (``plugins/jobset/builder.go``
  ``Trainer``, ``jobset.go`` ``Build``) ``trainer.image``, ``command``, ``args`` replacing the
  runtime's, ``trainer.env`` upserted by name, then the torch plugin's variables (``torch.go``
  ``EnforceMLPolicy``): ``PET_NNODES`` = the node count, ``PET_NPROC_PER_NODE`` =
  ``numProcPerNode`` or ``auto`` (``auto`` without a GPU becomes the CPU request, at least 1),
  ``PET_NODE_RANK`` from a fieldRef to the ``batch.kubernetes.io/job-completion-index``
  annotation, ``PET_MASTER_ADDR`` = ``<trainjob>-node-0-0.<trainjob>``, ``PET_MASTER_PORT`` =
  29500 (``constants.ContainerTrainerPort``), and container port 29500;
* the TrainJob's condition from the JobSet's (``jobset.go`` ``Status``): Completed ->
  ``Complete``, Failed -> ``Failed``.

From kubernetes-sigs/jobset at tag ``v0.12.0`` (trainer v2.3.0's go.mod):

* the webhook's defaults (``pkg/webhooks/jobset_webhook.go``): ``successPolicy`` All,
  ``completionMode`` Indexed, pod ``restartPolicy`` OnFailure, ``network.enableDNSHostnames``;
* Job names ``<jobset>-<replicatedJob>-<jobIndex>`` (``pkg/util/placement``), the pods'
  ``subdomain`` = ``network.subdomain`` or the JobSet name, a headless Service of that name
  (``jobset_controller.go``); labels and annotations ``jobset.sigs.k8s.io/jobset-name``,
  ``replicatedjob-name``, ``restart-attempt``, ``replicatedjob-replicas``, ``global-replicas``,
  ``job-index``, ``job-global-index`` (``labelAndAnnotateObject``);
* the failure policy (``pkg/controllers/failure_policy.go``): a failed child Job fails the
  JobSet (reason ``FailedJobs``) without ``failurePolicy``; with one, every Job is deleted and
  created again (``restart-attempt`` + 1) until ``maxRestarts`` (then ``ReachedMaxRestarts``);
  the success policy (``success_policy.go``): the targeted Jobs all (``All``) or one (``Any``)
  succeeded.

And the Job controller's part (Kubernetes batch/v1 Indexed Jobs, KEP-2214): one pod per
completion index with hostname ``<job>-<index>`` and ``generateName`` ``<job>-<index>-``, the
``batch.kubernetes.io/job-completion-index`` label and annotation and ``JOB_COMPLETION_INDEX``;
``restartPolicy`` OnFailure restarts the container in place and fails the Job once the restarts
reach ``backoffLimit`` (default 6; a limit of 0 fails at the first), Never replaces a failed pod
(new emptyDirs) and fails the Job once more than ``backoffLimit`` pods failed.

Pods are named by hostname here (``<trainjob>-node-0-<index>``); ``<hostname>.<subdomain>`` (and
its ``.<namespace>.svc.cluster.local`` forms) resolves through every pod's hosts file, a bare
hostname only in its own pod, as with cluster DNS. Processes, kubelet, volumes and network are
the PyTorchJob emulator's (:mod:`tests.jobs.pytorchjob_emulator`, its docstring says what they
do and what is not emulated). Also not emulated: initializers, suspend, Kueue, failure policy
rules, the Job controller's backoff delay between pod replacements (``restart_delay_s``), new pod
addresses after a JobSet restart (pods keep theirs), ``activeDeadlineSeconds``, podFailurePolicy.
"""

from __future__ import annotations

from tests.jobs.trainjob_emulator.resolve import (
    COMPLETION_INDEX,
    NODE,
    RESTARTS_KEY,
    TRAINER_PORT,
    jobset,
    pod_name,
    pods,
    strategic_merge,
    subdomain,
)
from tests.jobs.trainjob_emulator.run import TrainJobResult, TrainJobRun, running_trainjob

__all__ = [
    "COMPLETION_INDEX",
    "NODE",
    "RESTARTS_KEY",
    "TRAINER_PORT",
    "TrainJobResult",
    "TrainJobRun",
    "jobset",
    "pod_name",
    "pods",
    "running_trainjob",
    "strategic_merge",
    "subdomain",
]
