"""Pure builders: an Experiment in, the desired child objects out, as plain dicts.

Called by ``experiment_handlers`` (which adopts and applies what these return) and by the
golden-file tests. Nothing here imports kopf or kubernetes, reads the environment or talks to a
cluster: the platform wiring (object store, Secret names) comes in as a :class:`Platform` value.

Children of an Experiment ``<name>`` in its namespace:

* ConfigMap ``<name>-config``: ``experiment.yaml`` (the validated, fully resolved spec, with the
  embedding URL filled in when the operator creates the embedding service) and ``backend``.
* PyTorchJob ``<name>`` (``kubeflow.org/v1``): Master + ``nodes - 1`` Workers running the verl
  trainer entrypoint on the mounted ``experiment.yaml`` — or, with Kubeflow Trainer v2, the
  TrainJob ``<name>`` built by :mod:`sarl_operator.trainjob` from the same container and pod
  pieces (:func:`trainer_container`, :func:`job_pod`, :func:`trainer_pod_metadata`).
* InferenceService ``<name>-embedding``, only when a reward uses an ``openai`` embedder whose
  ``url`` is empty (the rule: empty → the operator serves the model named in ``embedder.model``
  with vLLM on KServe's Hugging Face runtime; non-empty → that existing service is used as is).
  Every InferenceService carries ``spec.serving.deployment_mode`` as KServe's
  ``serving.kserve.io/deploymentMode`` annotation (:mod:`sarl_operator.knative`).
* InferenceService ``<name>-judge``, only when a chat endpoint of a reward (``structured_qa``'s
  ``judge_client`` with ``judge`` on, ``rlkd``'s ``decomposer``/``judge``) names a ``model`` but
  no ``url``: the operator serves that model with vLLM (OpenAI chat) and the endpoint's URL is
  :func:`judge_url`. Those rewards refuse an endpoint without a URL, so the handlers call
  :func:`fill_judge_urls` on the raw spec *before* validation; afterwards an endpoint whose URL is
  :func:`judge_url` is recognised as served (:func:`served_judges`). An endpoint with a URL is
  referenced as is.

The evaluation Job (``<name>-eval``) is built by :mod:`sarl_operator.evaluation`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import yaml

from sarl.integrations.cluster import (
    CONFIG_SUFFIX,
    EMBEDDING_SUFFIX,
    JUDGE_SUFFIX,
    chat_endpoints,
    fill_chat_urls,
    served_embedders,
)
from sarl.plan import store_capacity_from_env
from sarl.spec.experiment import GPU_RESOURCE as DEFAULT_GPU_RESOURCE
from sarl.spec.experiment import Experiment, ResourcesSpec, SecretKeyRef, ServedModelSpec
from sarl.spec.model_source import ModelUri
from sarl_operator import knative, model_sources, scheduling

CONFIG_DIR: Final = "/etc/sarl"
CONFIG_FILE: Final = "experiment.yaml"
#: Trainer entrypoint per ``spec.resources.backend`` (each takes the config path as its argument).
TRAINER_MODULES: Final[Mapping[str, str]] = {
    "verl": "sarl_jobs.verl_trainer",
    "trl": "sarl_jobs.trl_trainer",
}
#: The default of ``spec.resources.gpu_resource``.
GPU_RESOURCE: Final = DEFAULT_GPU_RESOURCE
#: Where every job pod's scratch volume (checkpoints, caches, temporary files) is mounted; the
#: jobs find it through TMPDIR (:func:`scratch_env`). Not /tmp itself: the image's /tmp stays
#: the container's, as programs that hard-code it expect.
SCRATCH_DIR: Final = "/mnt/scratch"
SCRATCH_VOLUME: Final = "scratch"
HF_TOKEN_ENV: Final = "HF_TOKEN"
#: Pod template annotations of the trainer, evaluation and report pods. Istio's sidecar never
#: exits, so a job pod with one never completes: Kubeflow documents this annotation for Training
#: Operator jobs in Istio-injected namespaces (kubeflow.org/docs/components/training/pytorch/).
JOB_POD_ANNOTATIONS: Final[Mapping[str, str]] = {"sidecar.istio.io/inject": "false"}
#: Restarts per node before a PyTorchJob is Failed; each restart resumes from the last checkpoint.
#: The Training Operator counts the restarts of every pod of the job against one backoffLimit
#: (pkg/controller.v1/common/job.go, v1.9.4: past backoffLimit), and losing one node of a
#: multi-node verl job restarts every node (the Ray cluster is rebuilt), so the limit is
#: RESTARTS x nodes: a 2-node job survives 3 node losses, as a 1-node job does.
RESTARTS: Final = 3
EXPERIMENT_LABEL: Final = "sarl.dev/experiment"
_EMBEDDING_MODEL_NAME: Final = "embedding"
_JUDGE_MODEL_NAME: Final = "judge"
#: Chat endpoints per reward name: the settings keys that hold {url, model, ...}.


@dataclass(frozen=True)
class Platform:
    """Where the platform's services are: the operator's SARL_* environment (chart-wired)."""

    s3_endpoint_url: str = ""
    s3_bucket: str = ""
    s3_credentials_secret: str = ""
    s3_access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    s3_secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"
    cluster_domain: str = "cluster.local"
    #: Where ``sarl data prepare`` wrote ``benchmarks/<name>.parquet`` (for the evaluation Job).
    data_uri: str = ""
    #: Kueue LocalQueue of jobs whose spec names none (``kueue.defaultQueue``); empty: none.
    default_queue: str = ""
    #: Gang scheduler of multi-node PyTorchJobs (``gangScheduler``): one of
    #: :data:`sarl_operator.scheduling.GANG_SCHEDULERS`.
    gang_scheduler: str = "none"
    #: Room for checkpoints in the platform's store, bytes (``SARL_STORE_CAPACITY``: the bundled
    #: store's volume or ``objectStore.external.capacity``); None: unknown, not checked.
    store_capacity: int | None = None
    #: Hugging Face Hub mirror (``SARL_HF_ENDPOINT``) for pods whose spec sets none; empty: none.
    hf_endpoint: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Platform:
        """Read the variables set by charts/sarl-platform/templates/operator-deployment.yaml."""
        return cls(
            s3_endpoint_url=env.get("SARL_S3_ENDPOINT_URL", ""),
            s3_bucket=env.get("SARL_S3_BUCKET", ""),
            s3_credentials_secret=env.get("SARL_S3_CREDENTIALS_SECRET", ""),
            s3_access_key_id_key=env.get("SARL_S3_ACCESS_KEY_ID_KEY") or cls.s3_access_key_id_key,
            s3_secret_access_key_key=env.get("SARL_S3_SECRET_ACCESS_KEY_KEY")
            or cls.s3_secret_access_key_key,
            data_uri=env.get("SARL_DATA_URI")
            or (f"s3://{env['SARL_S3_BUCKET']}/data" if env.get("SARL_S3_BUCKET") else ""),
            default_queue=env.get("SARL_DEFAULT_QUEUE", ""),
            gang_scheduler=_gang_scheduler(env.get("SARL_GANG_SCHEDULER") or "none"),
            hf_endpoint=model_sources.platform_hf_endpoint(env.get("SARL_HF_ENDPOINT", "")),
            store_capacity=store_capacity_from_env(env),
        )


def _gang_scheduler(value: str) -> str:
    """``SARL_GANG_SCHEDULER``, checked (the chart's schema allows these values only)."""
    if value not in scheduling.GANG_SCHEDULERS:
        allowed = ", ".join(scheduling.GANG_SCHEDULERS)
        raise ValueError(f"SARL_GANG_SCHEDULER={value!r}: must be one of {allowed}")
    return value


#: The platform with nothing configured (no object store): the builders' default.
DEFAULT_PLATFORM: Final = Platform()


def labels(exp: Experiment, component: str | None = None) -> dict[str, str]:
    """Standard app.kubernetes.io labels plus ``sarl.dev/experiment`` (the selector label)."""
    out = {
        "app.kubernetes.io/name": "sarl",
        "app.kubernetes.io/instance": exp.name,
        "app.kubernetes.io/part-of": "sarl",
        "app.kubernetes.io/managed-by": "sarl-operator",
        EXPERIMENT_LABEL: exp.name,
    }
    if component:
        out["app.kubernetes.io/component"] = component
    return out


def owned(
    obj: Mapping[str, Any], owner_meta: Mapping[str, Any], kind: str = "Experiment"
) -> dict[str, Any]:
    """A copy of ``obj`` owned (controller reference) by the ``sarl.dev`` resource of ``kind``
    (an Experiment, or a Study for its Experiments) with ``owner_meta``, so that deleting the
    owner garbage-collects it."""
    out = copy.deepcopy(dict(obj))
    ref = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": kind,
        "name": owner_meta["name"],
        "uid": owner_meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    refs = [r for r in out["metadata"].get("ownerReferences", []) if r.get("uid") != ref["uid"]]
    out["metadata"]["ownerReferences"] = [*refs, ref]
    return out


def meta(exp: Experiment, name: str, namespace: str, component: str) -> dict[str, Any]:
    """metadata of a child: name, namespace and :func:`labels`."""
    return {"name": name, "namespace": namespace, "labels": labels(exp, component)}


# Child names: the suffixes live in sarl.integrations.cluster, whose check_names keeps every
# child (and the Services the Training Operator and KServe derive from it) within 63 characters.
def config_name(exp: Experiment) -> str:
    return f"{exp.name}{CONFIG_SUFFIX}"


def embedding_name(exp: Experiment) -> str:
    return f"{exp.name}{EMBEDDING_SUFFIX}"


def judge_name(exp_name: str) -> str:
    return f"{exp_name}{JUDGE_SUFFIX}"


def backend(exp: Experiment) -> str:
    """The trainer backend of a cluster run (``spec.resources.backend``; the spec refuses a
    backend that cannot train the algorithm)."""
    return exp.spec.resources.backend


def _served_embedders(exp: Experiment) -> list[tuple[int, str]]:
    """(reward index, model id) of each openai embedder the operator must serve (empty url)."""
    return served_embedders(exp)


def embedding_url(exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM) -> str:
    """Cluster-local base URL of ``<name>-embedding`` (KServe serves OpenAI routes under
    ``/openai``; a RawDeployment predictor's Service is ``<isvc>-predictor``)."""
    return predictor_url(embedding_name(exp), namespace, platform)


def judge_url(exp_name: str, namespace: str, platform: Platform = DEFAULT_PLATFORM) -> str:
    """Cluster-local base URL of ``<name>-judge`` (chat clients append ``/v1/chat/completions``,
    KServe's Hugging Face runtime serves it under ``/openai``)."""
    host = f"{judge_name(exp_name)}-predictor.{namespace}.svc.{platform.cluster_domain}"
    return f"http://{host}/openai"


def fill_judge_urls(
    spec: Mapping[str, Any], exp_name: str, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> dict[str, Any]:
    """A copy of the raw ``spec`` (preset applied) in which each chat endpoint with a model and
    no url gets :func:`judge_url`; an unknown preset is left for validation to report."""
    return fill_chat_urls(spec, judge_url(exp_name, namespace, platform))


def served_judges(
    exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> list[tuple[str, str]]:
    """(field path, model id) of each chat endpoint the operator serves (url = judge_url)."""
    url = judge_url(exp.name, namespace, platform)
    reward = [term.model_dump(mode="json") for term in exp.spec.reward]
    return [
        (path, str(endpoint["model"]))
        for path, endpoint in chat_endpoints(reward)
        if endpoint.get("url") == url and endpoint.get("model")
    ]


def rendered_spec(
    exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> dict[str, Any]:
    """The resolved Experiment as the trainer reads it: served embedders get the ISVC URL."""
    doc = exp.model_dump(mode="json")
    doc["metadata"]["namespace"] = namespace
    for index, _ in _served_embedders(exp):
        emb = doc["spec"]["reward"][index]["settings"]["embedder"]
        emb["url"] = embedding_url(exp, namespace, platform)
        emb["model"] = _EMBEDDING_MODEL_NAME
    # The served judge answers to its --model_name, not to the Hugging Face id.
    judge = judge_url(exp.name, namespace, platform)
    for _, endpoint in chat_endpoints(doc["spec"]["reward"]):
        if endpoint.get("url") == judge:
            endpoint["model"] = _JUDGE_MODEL_NAME
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


def checkpoint_uri(exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM) -> str:
    """``spec.storage.checkpoint_uri``, else ``s3://<bucket>/checkpoints/<ns>/<name>`` on the
    platform bucket, else empty (the job keeps checkpoints on its pod only)."""
    if exp.spec.storage.checkpoint_uri:
        return exp.spec.storage.checkpoint_uri
    if platform.s3_bucket:
        return f"s3://{platform.s3_bucket}/checkpoints/{namespace}/{exp.name}"
    return ""


def job_env(
    exp: Experiment,
    namespace: str,
    mlflow_run_id: str,
    tracking_uri: str,
    platform: Platform,
    config_file: str = CONFIG_FILE,
) -> list[dict[str, Any]]:
    """Environment of the trainer (and evaluation, Study report) containers: config (the file
    ``config_file`` of the mounted ConfigMap), MLflow, checkpoints, S3."""
    storage = exp.spec.storage
    tracking = exp.spec.tracking.mlflow_uri or tracking_uri
    env: list[dict[str, Any]] = [
        {"name": "SARL_EXPERIMENT", "value": exp.name},
        {"name": "SARL_CONFIG", "value": f"{CONFIG_DIR}/{config_file}"},
        {"name": "MLFLOW_TRACKING_URI", "value": tracking},
        {"name": "MLFLOW_RUN_ID", "value": mlflow_run_id},
        {"name": "SARL_CHECKPOINT_URI", "value": checkpoint_uri(exp, namespace, platform)},
        # Where `sarl data prepare` wrote datasets and benchmarks (relative dataset paths).
        {"name": "SARL_DATA_URI", "value": platform.data_uri},
    ]
    endpoint = storage.endpoint_url or platform.s3_endpoint_url
    if endpoint:
        env += [
            {"name": "AWS_ENDPOINT_URL", "value": endpoint},
            {"name": "MLFLOW_S3_ENDPOINT_URL", "value": endpoint},
        ]
    secret = storage.credentials_secret or platform.s3_credentials_secret
    if secret:  # a Secret reference only, never the values
        for name, key in (
            ("AWS_ACCESS_KEY_ID", platform.s3_access_key_id_key),
            ("AWS_SECRET_ACCESS_KEY", platform.s3_secret_access_key_key),
        ):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    # The trainer downloads the policy and the evaluation its tokenizer: gated models need it.
    env += hf_token_env(exp.spec.resources.hf_token)
    # The Hub's mirror, or offline when the policy comes from the store (model_sources).
    env += model_sources.job_hub_env(exp, platform.hf_endpoint)
    return env


def hf_token_env(ref: SecretKeyRef | None) -> list[dict[str, Any]]:
    """``HF_TOKEN`` from the Secret key ``ref`` (huggingface_hub reads it for every download),
    or nothing."""
    if ref is None:
        return []
    key_ref = {"name": ref.secret_name, "key": ref.key}
    return [{"name": HF_TOKEN_ENV, "valueFrom": {"secretKeyRef": key_ref}}]


def scratch_env() -> list[dict[str, Any]]:
    """Environment that puts every pod's temporary files and caches on the scratch volume
    mounted at :data:`SCRATCH_DIR`: TMPDIR (the jobs' work directories, local checkpoints and
    Ray's session files derive from it; set because an image may point it elsewhere), HF_HOME
    (downloaded models and datasets) and XDG_CACHE_HOME (vLLM's and other libraries' caches)."""
    return [
        {"name": "TMPDIR", "value": SCRATCH_DIR},
        {"name": "HF_HOME", "value": f"{SCRATCH_DIR}/huggingface"},
        {"name": "XDG_CACHE_HOME", "value": f"{SCRATCH_DIR}/cache"},
    ]


def pod_resources(
    exp: Experiment, cpu: str, memory: str, scratch: str, gpus: int
) -> dict[str, Any]:
    """Container resources with requests equal to limits (Guaranteed QoS: evicted last): cpu,
    memory, ``gpus`` of ``spec.resources.gpu_resource`` and, unless the scratch volume is a
    claim, ``scratch`` of ephemeral-storage (the scheduler then picks a node with that much
    free disk, and the kubelet evicts the pod rather than fill the node's disk)."""
    res = exp.spec.resources
    amounts = {"cpu": cpu, "memory": memory}
    if not res.scratch_claim:
        amounts["ephemeral-storage"] = scratch
    if gpus:
        amounts[res.gpu_resource] = str(gpus)  # quantities are strings
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _resources(exp: Experiment) -> dict[str, Any]:
    res = exp.spec.resources
    return pod_resources(exp, res.cpu, res.memory, res.scratch_size, res.gpus_per_node)


def _scratch(exp: Experiment, size: str) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """The scratch volume, its mount at :data:`SCRATCH_DIR` and the environment it needs: an
    emptyDir of ``size``, or ``spec.resources.scratch_claim`` with one sub-directory per pod
    (``subPathExpr``: replicas must not share Ray's sockets and work directories)."""
    claim = exp.spec.resources.scratch_claim
    mount: dict[str, Any] = {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}
    if not claim:
        volume = {"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": size}}
        return volume, mount, []
    volume = {"name": SCRATCH_VOLUME, "persistentVolumeClaim": {"claimName": claim}}
    mount["subPathExpr"] = "$(POD_NAME)"  # expanded by the kubelet from the container's env
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    return volume, mount, env


def job_pod(
    exp: Experiment, container: dict[str, Any], scratch_size: str | None = None
) -> dict[str, Any]:
    """Pod spec around ``container`` for the Experiment's jobs (training, evaluation, a Study's
    report): the config volume, a memory-backed /dev/shm, the scratch volume at /mnt/scratch
    (``scratch_size``, default ``spec.resources.scratch_size``; the container's resources
    should request as much ephemeral-storage, :func:`pod_resources`), and the spec's node
    selector, tolerations, service account and image pull secrets."""
    res = exp.spec.resources
    volume, scratch_mount, scratch_vars = _scratch(exp, scratch_size or res.scratch_size)
    model_volumes, model_mounts = model_sources.policy_volume(exp)  # a pvc:// policy's claim
    mounts = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        scratch_mount,
        *model_mounts,
    ]
    env = [*container.get("env", []), *scratch_vars, *scratch_env()]
    pod: dict[str, Any] = {
        "containers": [{**container, "env": env, "volumeMounts": mounts}],
        "volumes": [
            {"name": "config", "configMap": {"name": config_name(exp)}},
            # NCCL, Ray and vLLM's workers need more shared memory than the container default
            # of 64 MiB.
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            # Checkpoints and caches (~60 GB per Qwen3-4B checkpoint) must not fill the
            # container's writable layer, which has no size limit and shares the node's disk.
            volume,
            *model_volumes,
        ],
    }
    if res.service_account:
        pod["serviceAccountName"] = res.service_account
    if res.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in res.image_pull_secrets]
    if res.node_selector:
        pod["nodeSelector"] = dict(res.node_selector)
    if res.tolerations:
        pod["tolerations"] = [dict(t) for t in res.tolerations]
    return pod


def trainer_container(
    exp: Experiment, name: str, image: str, env: list[dict[str, Any]]
) -> dict[str, Any]:
    """The trainer container ``name`` of every training node (PyTorchJob replica, TrainJob
    node): the backend's entrypoint on the mounted config, ``env``, the spec's resources."""
    return {
        "name": name,
        "image": image,
        "command": ["python", "-m", TRAINER_MODULES[backend(exp)]],
        "args": [f"{CONFIG_DIR}/{CONFIG_FILE}"],
        "env": copy.deepcopy(env),  # no shared objects between replicas
        "resources": _resources(exp),
    }


def trainer_pod_metadata(exp: Experiment) -> dict[str, Any]:
    """Labels and annotations of every training pod (PyTorchJob replica, TrainJob node)."""
    return {"labels": labels(exp, "trainer"), "annotations": dict(JOB_POD_ANNOTATIONS)}


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


def _vllm_isvc(
    metadata: dict[str, Any],
    model_name: str,
    source: ModelUri,
    served: ServedModelSpec,
    res: ResourcesSpec,
    task_args: list[str],
    hf_endpoint: str = "",
) -> dict[str, Any]:
    """An InferenceService serving ``source`` with vLLM on KServe's Hugging Face runtime (a Hub
    id by ``--model_id``; an s3 or pvc source from ``storageUri``, :mod:`model_sources`).

    KServe strategic-merges ``predictor.model`` into the runtime's container (1 CPU, 2Gi) and
    appends these args to the runtime's ``--model_name={{.Name}}`` (the later flag wins), so
    cpu, memory and GPUs are all written here; tests/operators/kserve_merge.py checks the result.
    """
    gpu = served.gpu_resource or res.gpu_resource
    amounts = {"cpu": served.cpu, "memory": served.memory, gpu: str(served.gpus)}
    args = [
        f"--model_name={model_name}",
        *model_sources.served_args(source),
        "--backend=vllm",
        f"--max_model_len={served.max_model_len}",
    ]
    if served.gpus > 1:  # vLLM uses one GPU unless told to shard the model over the others
        args.append(f"--tensor-parallel-size={served.gpus}")
    predictor: dict[str, Any] = {
        "minReplicas": 1,
        "model": {
            "modelFormat": {"name": "huggingface"},
            "args": [*args, *task_args, *served.extra_args],
            # Extended resources (the GPU) must have requests == limits; cpu and memory follow.
            "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        },
    }
    # A gated model: the runtime downloads it with huggingface_hub, which reads HF_TOKEN; the
    # Hub's mirror, or offline for a model from the store.
    env = hf_token_env(served.hf_token or res.hf_token)
    env += model_sources.hub_env(source, res.hf_endpoint or hf_endpoint)
    if env:
        predictor["model"]["env"] = env
    # PredictorSpec inlines a PodSpec (KServe's predictor.go): pod fields sit on the predictor.
    service_account = served.service_account or res.service_account
    if service_account:
        predictor["serviceAccountName"] = service_account
    pull_secrets = served.image_pull_secrets or res.image_pull_secrets
    if pull_secrets:
        predictor["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    # Empty: the training pods' placement (ServedModelSpec.node_selector documents this).
    node_selector = served.node_selector or res.node_selector
    tolerations = served.tolerations or res.tolerations
    if node_selector:
        predictor["nodeSelector"] = dict(node_selector)
    if tolerations:
        predictor["tolerations"] = [dict(t) for t in tolerations]
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {"predictor": predictor},
    }


def _embedding_isvc(
    exp: Experiment, namespace: str, model: str, field: str, platform: Platform
) -> dict[str, Any]:
    metadata = meta(exp, embedding_name(exp), namespace, "embedding")
    metadata["labels"]["sarl.dev/embedding-backend"] = "vllm"
    # vLLM serves embeddings only as a pooling model (vLLM >= 0.10.1, KServe >= 0.17: older
    # runtimes drop the unknown flag and load the model as a generator).
    served = exp.spec.serving.embedding
    source = model_sources.served_source(model, field)
    isvc = _vllm_isvc(
        metadata, _EMBEDDING_MODEL_NAME, source, served, exp.spec.resources,
        ["--runner=pooling"], platform.hf_endpoint,
    )  # fmt: skip
    isvc = model_sources.with_storage(isvc, source, _credentials_secret(exp, platform))
    return _with_deployment_mode(exp, isvc, "embedding")


def _judge_isvc(
    exp: Experiment, namespace: str, model: str, field: str, platform: Platform
) -> dict[str, Any]:
    metadata = meta(exp, judge_name(exp.name), namespace, "judge")
    metadata["labels"]["sarl.dev/judge-backend"] = "vllm"
    # Generation is the runtime's default task; the judge is called on /openai/v1/chat/completions.
    served = exp.spec.serving.judge
    source = model_sources.served_source(model, field)
    isvc = _vllm_isvc(
        metadata, _JUDGE_MODEL_NAME, source, served, exp.spec.resources, [], platform.hf_endpoint
    )
    isvc = model_sources.with_storage(isvc, source, _credentials_secret(exp, platform))
    return _with_deployment_mode(exp, isvc, "judge")


def _credentials_secret(exp: Experiment, platform: Platform) -> str:
    """The S3 credentials Secret of the Experiment's pods (as :func:`job_env`)."""
    return exp.spec.storage.credentials_secret or platform.s3_credentials_secret


def _with_deployment_mode(exp: Experiment, isvc: dict[str, Any], served: str) -> dict[str, Any]:
    """``isvc`` with ``spec.serving.deployment_mode`` written as KServe's annotation, always:
    KServe's own default is Serverless, where Knative refuses the node selector and tolerations
    the predictor inherits from training (ValueError naming the flag, :mod:`knative`)."""
    serving = exp.spec.serving
    where = f"spec.serving.{served}"
    spec_fields = {
        "nodeSelector": f"{where}.node_selector (or spec.resources.node_selector)",
        "tolerations": f"{where}.tolerations (or spec.resources.tolerations)",
    }
    return knative.set_deployment_mode(
        isvc, serving.deployment_mode, serving.knative_features, spec_fields
    )


def _one_model(served: list[tuple[str, str]], where: str, noun: str) -> str | None:
    models = sorted({model for _, model in served})
    if len(models) > 1:
        raise ValueError(
            f"{where}: {noun} endpoints without url name different models {models}; "
            f"the operator serves one {noun} model per Experiment"
        )
    return models[0] if models else None


def embedding_service(
    exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> dict[str, Any] | None:
    """InferenceService ``<name>-embedding`` for the embedders the operator serves (None: every
    embedder has a URL). A Study builds its shared embedding service from this one."""
    embedders = [(f"spec.reward[{i}]", model) for i, model in _served_embedders(exp)]
    embedding_model = _one_model(embedders, "spec.reward", "embedding")
    if embedding_model is None:
        return None
    field = next(f"{p}.settings.embedder.model" for p, m in embedders if m == embedding_model)
    return _embedding_isvc(exp, namespace, embedding_model, field, platform)


def predictor_url(isvc_name: str, namespace: str, platform: Platform = DEFAULT_PLATFORM) -> str:
    """Cluster-local base URL of InferenceService ``isvc_name``'s OpenAI routes (as
    :func:`embedding_url`)."""
    return f"http://{isvc_name}-predictor.{namespace}.svc.{platform.cluster_domain}/openai"


def point_embedders(exp: Experiment, url: str) -> dict[str, Any]:
    """``exp.spec`` as JSON in which each embedder the operator would serve (empty url) calls
    ``url`` instead, by the served model's name: an Experiment of a Study that serves one
    embedding model for all its runs (a non-empty url: the Experiment serves nothing itself)."""
    spec = exp.spec.model_dump(mode="json")
    for index, _ in _served_embedders(exp):
        emb = spec["reward"][index]["settings"]["embedder"]
        emb["url"] = url
        emb["model"] = _EMBEDDING_MODEL_NAME
    return spec


def inference_services(
    exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> list[dict[str, Any]]:
    """The InferenceServices the rewards need: at most one embedding and one judge ISVC."""
    out: list[dict[str, Any]] = []
    embedding = embedding_service(exp, namespace, platform)
    if embedding is not None:
        out.append(embedding)
    judges = served_judges(exp, namespace, platform)
    judge_model = _one_model(judges, ", ".join(p for p, _ in judges), "judge")
    if judge_model is not None:
        field = next(f"{p}.model" for p, m in judges if m == judge_model)
        out.append(_judge_isvc(exp, namespace, judge_model, field, platform))
    return out


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
