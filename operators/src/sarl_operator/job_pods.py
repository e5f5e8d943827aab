"""The pod and container pieces of an Experiment's jobs: environment, volumes, resources.

Called by the job builders: ``builders.pytorchjob`` and ``trainjob`` (the trainer container
:func:`trainer_container` in :func:`job_pod`, with :func:`trainer_pod_metadata`),
``evaluation.eval_job`` and ``study_builders.report_job`` (:func:`job_env`, :func:`job_pod`,
:func:`pod_resources`), and by ``reconcile``/``experiment_handlers`` (:func:`backend`,
:func:`checkpoint_uri`). Every job pod mounts the Experiment's ConfigMap at :data:`CONFIG_DIR`,
a memory-backed /dev/shm and a scratch volume at :data:`SCRATCH_DIR`. Pure: plain dicts out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from sarl.cluster.tenancy import TENANT_SECRET, TenantKeys
from sarl.spec.cluster_fields import GPU_RESOURCE as DEFAULT_GPU_RESOURCE
from sarl.spec.cluster_fields import SecretKeyRef
from sarl.spec.experiment import Experiment
from sarl_operator import model_sources, pod_security
from sarl_operator.child_meta import config_name, labels
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform

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


def backend(exp: Experiment) -> str:
    """The trainer backend of a cluster run (``spec.resources.backend``; the spec refuses a
    backend that cannot train the algorithm)."""
    return exp.spec.resources.backend


def checkpoint_uri(exp: Experiment, namespace: str, platform: Platform = DEFAULT_PLATFORM) -> str:
    """``spec.storage.checkpoint_uri``, else ``s3://<bucket>/checkpoints/<ns>/<name>`` on the
    platform bucket, else empty (the job keeps checkpoints on its pod only)."""
    if exp.spec.storage.checkpoint_uri:
        return exp.spec.storage.checkpoint_uri
    if platform.s3_bucket:
        return f"s3://{platform.s3_bucket}/checkpoints/{namespace}/{exp.name}"
    return ""


def data_uri(namespace: str, platform: Platform) -> str:
    """Where ``namespace``'s pods find what ``sarl data prepare`` wrote: on a platform with
    tenants and a bucket ``s3://<bucket>/data/<ns>`` (the only data prefix its key reaches,
    :func:`sarl.cluster.tenancy.store_prefixes`), else the platform's ``SARL_DATA_URI``."""
    if platform.tenancy.enabled and platform.s3_bucket:
        return f"s3://{platform.s3_bucket}/data/{namespace}"
    return platform.data_uri


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
        {"name": "SARL_DATA_URI", "value": data_uri(namespace, platform)},
    ]
    endpoint = storage.endpoint_url or platform.s3_endpoint_url
    if endpoint:
        env += [
            {"name": "AWS_ENDPOINT_URL", "value": endpoint},
            {"name": "MLFLOW_S3_ENDPOINT_URL", "value": endpoint},
        ]
    secret, id_key, secret_key = store_credentials(exp, namespace, platform)
    if secret:  # a Secret reference only, never the values
        for name, key in (("AWS_ACCESS_KEY_ID", id_key), ("AWS_SECRET_ACCESS_KEY", secret_key)):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    env += tenant_env(namespace, platform)
    # The trainer downloads the policy and the evaluation its tokenizer: gated models need it.
    env += hf_token_env(exp.spec.resources.hf_token)
    # The Hub's mirror, or offline when the policy comes from the store (model_sources).
    env += model_sources.job_hub_env(exp, platform.hf_endpoint)
    return env


def store_credentials(exp: Experiment, namespace: str, platform: Platform) -> tuple[str, str, str]:
    """(Secret, access-key-id key, secret-access-key key) of the object-store credentials the
    Experiment's pods in ``namespace`` get: ``spec.storage.credentials_secret`` (the tenant policy
    allows only its own Secrets), else, on a platform with tenants, the tenant's own key pair in
    :data:`~sarl.cluster.tenancy.TENANT_SECRET` (limited to its store prefixes: the platform's
    root key never leaves the platform namespace), else the platform's Secret; empty name:
    none."""
    own = exp.spec.storage.credentials_secret
    if own:
        return own, platform.s3_access_key_id_key, platform.s3_secret_access_key_key
    if platform.tenancy.enabled:
        return TENANT_SECRET, TenantKeys.STORE_ACCESS_KEY_ID, TenantKeys.STORE_SECRET_ACCESS_KEY
    secret = platform.s3_credentials_secret
    return secret, platform.s3_access_key_id_key, platform.s3_secret_access_key_key


#: The tenant's credentials every pod of its jobs gets besides the store's key pair: its MLflow
#: user, checkpoint-signing key, Ray token and served-model API key (each read under its key's
#: name by MLflow's client, sarl's checkpoints, Ray and sarl's serving clients).
TENANT_ENV_KEYS: Final = (
    TenantKeys.MLFLOW_USERNAME,
    TenantKeys.MLFLOW_PASSWORD,
    TenantKeys.CHECKPOINT_KEY,
    TenantKeys.RAY_TOKEN,
    TenantKeys.SERVING_API_KEY,
)


def tenant_env(namespace: str, platform: Platform) -> list[dict[str, Any]]:
    """The tenant's credentials (:data:`TENANT_ENV_KEYS`) from its own
    :data:`~sarl.cluster.tenancy.TENANT_SECRET` in ``namespace``; nothing on a platform
    without tenants."""
    if not platform.tenancy.enabled:
        return []
    return [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": TENANT_SECRET, "key": key}}}
        for key in TENANT_ENV_KEYS
    ]


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
    (downloaded models and datasets), XDG_CACHE_HOME (vLLM's and other libraries' caches) and
    HOME (the volume itself, which exists: what the rest writes under ``~``, e.g. Triton's
    kernel cache): the pods run as
    :data:`~sarl_operator.pod_security.SARL_UID`, whose home in an image built for another user
    (``spec.resources.image``) may not exist or be writable."""
    return [
        {"name": "TMPDIR", "value": SCRATCH_DIR},
        {"name": "HOME", "value": SCRATCH_DIR},
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
    should request as much ephemeral-storage, :func:`pod_resources`), the spec's node
    selector, tolerations, service account and image pull secrets, and the security settings of
    the Pod Security Standard ``restricted`` (:mod:`~sarl_operator.pod_security`; init containers
    added to the pod take :func:`~sarl_operator.pod_security.container_context` too)."""
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
    hardened = {**container, "env": env, "volumeMounts": mounts}
    hardened["securityContext"] = pod_security.container_context()
    pod: dict[str, Any] = {
        "securityContext": pod_security.pod_context(pod_security.SARL_UID),
        "containers": [hardened],
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
    pod.update(pod_security.token_mount(res.service_account))
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
