"""Pure builders: an Experiment in, the desired child objects out, as plain dicts.

Called by ``experiment_handlers`` (which adopts and applies what these return) and by the
golden-file tests. Nothing here imports kopf or kubernetes, reads the environment or talks to a
cluster: the platform wiring (object store, Secret names) comes in as a
:class:`~sarl_operator.platform_settings.Platform` value.

Children of an Experiment ``<name>`` in its namespace:

* ConfigMap ``<name>-config``: ``experiment.yaml`` (the validated, fully resolved spec, with the
  embedding URL filled in when the operator creates the embedding service) and ``backend``.
* PyTorchJob ``<name>`` (``kubeflow.org/v1``): Master + ``nodes - 1`` Workers running the verl
  trainer entrypoint on the mounted ``experiment.yaml`` — or, with Kubeflow Trainer v2, the
  TrainJob ``<name>`` built by :mod:`sarl_operator.trainjob` from the same container and pod
  pieces (:mod:`sarl_operator.job_pods`: ``trainer_container``, ``job_pod``,
  ``trainer_pod_metadata``).
* InferenceServices ``<name>-embedding`` and ``<name>-judge`` for the models the rewards need the
  operator to serve: built by :mod:`sarl_operator.served_models`.

The evaluation Job (``<name>-eval``) is built by :mod:`sarl_operator.evaluation`; names, labels
and owner references of every child by :mod:`sarl_operator.child_meta`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

import yaml

from sarl.integrations.cluster import chat_endpoints, served_embedders
from sarl.spec.experiment import Experiment
from sarl_operator import scheduling
from sarl_operator.child_meta import config_name, meta
from sarl_operator.job_pods import (
    CONFIG_FILE,
    backend,
    job_env,
    job_pod,
    trainer_container,
    trainer_pod_metadata,
)
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform
from sarl_operator.served_models import (
    EMBEDDING_MODEL_NAME,
    JUDGE_MODEL_NAME,
    embedding_url,
    judge_url,
)

#: Restarts per node before a PyTorchJob is Failed; each restart resumes from the last checkpoint.
#: The Training Operator counts the restarts of every pod of the job against one backoffLimit
#: (pkg/controller.v1/common/job.go, v1.9.4: past backoffLimit), and losing one node of a
#: multi-node verl job restarts every node (the Ray cluster is rebuilt), so the limit is
#: RESTARTS x nodes: a 2-node job survives 3 node losses, as a 1-node job does.
RESTARTS: Final = 3


def rendered_spec(
    exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> dict[str, Any]:
    """The resolved Experiment as the trainer reads it: served embedders get the ISVC URL."""
    doc = exp.model_dump(mode="json")
    doc["metadata"]["namespace"] = namespace
    for index, _ in served_embedders(exp):
        emb = doc["spec"]["reward"][index]["settings"]["embedder"]
        emb["url"] = embedding_url(exp, namespace, platform)
        emb["model"] = EMBEDDING_MODEL_NAME
    # The served judge answers to its --model_name, not to the Hugging Face id.
    judge = judge_url(exp.name, namespace, platform)
    for _, endpoint in chat_endpoints(doc["spec"]["reward"]):
        if endpoint.get("url") == judge:
            endpoint["model"] = JUDGE_MODEL_NAME
    return doc


def configmap(
    exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> dict[str, Any]:
    """ConfigMap ``<name>-config`` holding the rendered trainer config."""
    text = yaml.safe_dump(rendered_spec(exp, namespace, platform), sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(exp, config_name(exp), namespace, "config"),
        "data": {CONFIG_FILE: text, "backend": backend(exp)},
    }


def _replica(
    exp: Experiment, replicas: int, image: str, env: list[dict[str, Any]]
) -> dict[str, Any]:
    # The Training Operator requires this container name.
    pod = job_pod(exp, trainer_container(exp, "pytorch", image, env))
    metadata = trainer_pod_metadata(exp)
    return {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {"metadata": metadata, "spec": pod},
    }


def pytorchjob(
    exp: Experiment,
    namespace: str,
    *,
    image: str,
    mlflow_run_id: str,
    tracking_uri: str,
    platform: Platform = DEFAULT_PLATFORM,
) -> dict[str, Any]:
    """PyTorchJob ``<name>``: one Master and ``nodes - 1`` Workers, ``gpus_per_node`` each."""
    res = exp.spec.resources
    env = job_env(exp, namespace, mlflow_run_id, tracking_uri, platform)
    replicas = {"Master": _replica(exp, 1, image, env)}
    if res.nodes > 1:
        replicas["Worker"] = _replica(exp, res.nodes - 1, image, env)
        # Before the Training Operator's own init container (appended after this one), which
        # fails after ~200 s without the Master and whose restarts count against backoffLimit.
        worker = replicas["Worker"]["template"]["spec"]
        worker["initContainers"] = [scheduling.master_wait_container(exp.name, image)]
    for replica in replicas.values():
        pod = replica["template"]["spec"]
        pod.update(scheduling.pod_priority(exp))
        pod.update(scheduling.scheduler_name(exp, platform))
    # A lost or preempted pod restarts and resumes from the last checkpoint in the store
    # (sarl_jobs.resume); a run that keeps failing stops after RESTARTS retries per node.
    # Running: once the job has finished (Succeeded, or Failed past the backoff limit) the
    # Training Operator deletes its Running and Pending pods, so a failed job frees its GPUs;
    # ended pods stay for their logs. None (the default) keeps them all.
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running", "backoffLimit": RESTARTS * res.nodes}
    if scheduling.starts_suspended(exp, platform):  # Kueue unsuspends it on admission
        run_policy["suspend"] = True
    gang = scheduling.pytorchjob_scheduling_policy(exp, platform)
    if gang is not None:
        run_policy["schedulingPolicy"] = gang
    metadata = meta(exp, exp.name, namespace, "trainer")
    metadata["labels"].update(scheduling.job_labels(exp, platform))
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {
            "nprocPerNode": str(max(res.gpus_per_node, 1)),
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": replicas,
        },
    }


class JobBuilder(Protocol):
    """Builds the training job: :class:`PyTorchJobBuilder`, and
    :class:`sarl_operator.trainjob.TrainJobBuilder` for the Kubeflow Trainer v2 TrainJob."""

    @property
    def api_version(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def build(
        self,
        exp: Experiment,
        namespace: str,
        *,
        image: str,
        mlflow_run_id: str,
        tracking_uri: str,
        platform: Platform,
    ) -> dict[str, Any]: ...

    def update(self, job: dict[str, Any]) -> dict[str, Any]:
        """What to merge-patch onto the job ``build`` returned when it exists already."""
        ...


@dataclass(frozen=True)
class PyTorchJobBuilder:
    """:class:`JobBuilder` for the Kubeflow Training Operator v1 ``PyTorchJob``."""

    api_version: str = "kubeflow.org/v1"
    kind: str = "PyTorchJob"

    def build(
        self,
        exp: Experiment,
        namespace: str,
        *,
        image: str,
        mlflow_run_id: str,
        tracking_uri: str,
        platform: Platform,
    ) -> dict[str, Any]:
        return pytorchjob(
            exp,
            namespace,
            image=image,
            mlflow_run_id=mlflow_run_id,
            tracking_uri=tracking_uri,
            platform=platform,
        )

    def update(self, job: dict[str, Any]) -> dict[str, Any]:
        # Merge-patched as it is built (the Training Operator allows spec changes), except what
        # Kueue owns once the job exists: suspend and the queue label.
        return scheduling.creation_only(job)
