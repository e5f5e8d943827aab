"""The Experiment's cluster-only fields: pod resources, placement and the served models.

``spec.resources`` (:class:`ResourcesSpec`: trainer and evaluation pods) and ``spec.serving``
(:class:`ServingSpec`: the InferenceServices the operator creates for the rewards), with the
Kubernetes name and quantity validators they use. Local runs ignore them. Imported by
:mod:`sarl.spec.experiment` (the fields of ``ExperimentSpec``), the resource plan (``sarl plan``)
and the operator's pod and served-model builders.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, field_validator

from sarl.spec.model_source import check_http_url
from sarl.spec.strict import _Strict

#: DNS-1123 subdomain (Secret, ServiceAccount, PVC names; the prefix of a resource name).
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
#: The name part of a qualified name (apimachinery's IsQualifiedName).
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
#: A key of a Secret's data (apimachinery's IsConfigMapKey).
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
#: The GPU resource name unless spec.resources.gpu_resource names another.
GPU_RESOURCE: Final = "nvidia.com/gpu"


#: A Kubernetes resource quantity as the serving fields accept it ("4", "500m", "16Gi").
#: At most 19 integer digits: apimachinery's Quantity holds up to 2^63 - 1 (19 digits); a longer
#: one is refused by the API server and would overflow a float in the resource plan.
_QUANTITY: Final = re.compile(r"^[0-9]{1,19}(\.[0-9]{1,9})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# In the JSON schema and the CRD (the API server checks it too); the validator below words the
# error for people.
_QUANTITY_SCHEMA: Final[dict[str, Any]] = {"pattern": _QUANTITY.pattern}
#: A Knative Serving feature flag that gates a pod-spec or container-spec field.
_KNATIVE_FLAG: Final = re.compile(r"^kubernetes\.(podspec|containerspec)-[a-z-]+$")
#: vLLM's and KServe's flag (dashes and underscores alike, ``=true`` or bare) that runs the code
#: a model repository ships: a tenant's spec never enables it (issue 36, item 7).
_TRUST_REMOTE_CODE: Final = "--trust-remote-code"
#: Flags the operator writes on a served model's command line, dashes and underscores alike (vLLM's
#: parser treats them as one); ``extra_args`` must not repeat them, or the last one would win.
_MANAGED_FLAGS: Final = frozenset(
    {
        "--model-name",
        "--model-id",
        "--model-dir",  # where a storageUri model lands (s3://, pvc://)
        "--backend",
        "--runner",
        "--max-model-len",
        "--max-length",  # KServe's alias of --max_model_len
        "--tensor-parallel-size",
        "-tp",
    }
)


def _check_quantity(v: str) -> str:
    if not _QUANTITY.match(v):
        raise ValueError(f"{v!r} must be a Kubernetes quantity such as '4', '500m' or '16Gi'")
    return v


def _check_extended_resource(v: str) -> str:
    """Kubernetes' IsExtendedResourceName (pkg/apis/core/helper/helpers.go): a domain-prefixed
    name outside ``*kubernetes.io/``, not starting with ``requests.``, and a qualified name
    once ``requests.`` is put in front (what a ResourceQuota calls it)."""
    prefix, _, name = v.partition("/")
    qualified = f"requests.{prefix}"
    ok = (
        bool(name)
        and "kubernetes.io/" not in v
        and not v.startswith("requests.")
        and len(qualified) <= 253
        and bool(_DNS1123_SUBDOMAIN.match(qualified))
        and len(name) <= 63
        and bool(_QUALIFIED_NAME.match(name))
    )
    if not ok:
        raise ValueError(
            f"{v!r} is not an extended resource name: use '<vendor domain>/<name>', e.g. "
            "'nvidia.com/gpu', 'amd.com/gpu' or 'nvidia.com/mig-1g.10gb'"
        )
    return v


def _check_object_name(v: str) -> str:
    if len(v) > 253 or not _DNS1123_SUBDOMAIN.match(v):
        raise ValueError(
            f"{v!r} is not a Kubernetes object name: use a DNS-1123 subdomain (lowercase "
            "letters, digits, '-' and '.')"
        )
    return v


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_queue_name(v: str) -> str:
    # Kueue reads the queue from a label (kueue.x-k8s.io/queue-name): a label value, and the
    # name of a LocalQueue object, so a DNS-1123 label.
    if len(v) > 63 or not _DNS1123_LABEL.match(v):
        raise ValueError(
            f"{v!r} is not a Kueue LocalQueue name: use at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit (kubectl get localqueues lists them)"
        )
    return v


def _check_hf_endpoint(v: str) -> str:
    return check_http_url(v, "a Hugging Face mirror such as 'https://hf-mirror.internal'")


_Quantity = Annotated[str, AfterValidator(_check_quantity)]
_QueueName = Annotated[str, AfterValidator(_check_queue_name)]
_ExtendedResource = Annotated[str, AfterValidator(_check_extended_resource)]
_ObjectName = Annotated[str, AfterValidator(_check_object_name)]


class SecretKeyRef(_Strict):
    """A key of a Kubernetes Secret in the Experiment's namespace: the pod reads the value with
    ``valueFrom.secretKeyRef``; the spec names where the secret is, never the secret."""

    secret_name: str = Field(description="Name of the Secret (in the Experiment's namespace).")
    key: str = Field(default="HF_TOKEN", description="Key in the Secret that holds the value.")

    @field_validator("secret_name")
    @classmethod
    def _secret_name(cls, v: str) -> str:
        if len(v) > 253 or not _DNS1123_SUBDOMAIN.match(v):
            raise ValueError(
                f"{v!r} is not a Secret name: use a DNS-1123 subdomain (lowercase letters, "
                "digits, '-' and '.'), e.g. 'hf-token'"
            )
        return v

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if len(v) > 253 or not _SECRET_KEY.match(v):
            raise ValueError(
                f"{v!r} is not a Secret key: use letters, digits, '-', '_' and '.', e.g. 'HF_TOKEN'"
            )
        return v


class EvaluationPodSpec(_Strict):
    """CPU, memory and scratch disk of the evaluation Job's pod (one GPU, vLLM on the trained
    checkpoint), requests equal to limits."""

    cpu: _Quantity = Field(
        default="8", json_schema_extra=_QUANTITY_SCHEMA, description="CPU of the pod."
    )
    memory: _Quantity = Field(
        default="64Gi", json_schema_extra=_QUANTITY_SCHEMA, description="Memory of the pod."
    )
    scratch_size: _Quantity = Field(
        default="50Gi",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="Disk for the downloaded checkpoint and caches (as spec.resources."
        "scratch_size).",
    )


class ResourcesSpec(_Strict):
    """Cluster only; ignored by local runs. The trainer pods (each node of the PyTorchJob) ask
    for ``cpu``, ``memory`` and ``scratch_size`` with requests equal to limits (Guaranteed QoS:
    the last pods the kubelet evicts), plus ``gpus_per_node`` GPUs of ``gpu_resource``."""

    nodes: int = Field(default=1, ge=1, description="Trainer pods (nodes) of the job.")
    gpus_per_node: int = Field(default=8, ge=0, description="GPUs of each trainer pod.")
    cpu: _Quantity = Field(
        default="8",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="CPU of each trainer pod, request and limit. The paper presets ask for 64 "
        "(an 8-GPU node).",
    )
    memory: _Quantity = Field(
        default="64Gi",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="Memory of each trainer pod, request and limit (the /dev/shm volume "
        "counts against it). The paper presets ask for 512Gi.",
    )
    scratch_size: _Quantity = Field(
        default="100Gi",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="Disk of each pod's scratch volume, mounted at /mnt/scratch (TMPDIR, HF_HOME, "
        "XDG_CACHE_HOME): local checkpoints (storage.keep_last of them), the downloaded policy, "
        "Ray's spill and compile caches. An emptyDir with this sizeLimit and an equal "
        "ephemeral-storage request and limit. Qwen3-4B: ~60 GB per actor checkpoint (fp32 "
        "shards, Adam state, HF weights), 3 kept, so the paper presets ask for 256Gi (GRPO) and "
        "400Gi (PPO, whose critic checkpoints add ~48 GB each).",
    )
    scratch_claim: _ObjectName | None = Field(
        default=None,
        description="Name of a PersistentVolumeClaim to use instead of the emptyDir (each pod "
        "mounts its own sub-directory, named after the pod, so a restarted pod finds its "
        "caches); no ephemeral-storage is requested then. Several nodes need a ReadWriteMany "
        "claim.",
    )
    evaluation: EvaluationPodSpec = Field(
        default_factory=EvaluationPodSpec,
        description="CPU, memory and scratch disk of the evaluation Job's pod.",
    )
    gpu_memory: _Quantity = Field(
        default="80Gi",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="Memory of one GPU of gpu_resource (H100/A100 80GB: 80Gi; H200: 141Gi; "
        "a MIG profile: its slice, e.g. 10Gi). The resource plan (`sarl plan`) checks every "
        "trainer, evaluation and served pod against it; `sarl submit` and the operator refuse "
        "a spec that does not fit.",
    )
    gpu_resource: _ExtendedResource = Field(
        default=GPU_RESOURCE,
        description="Extended resource name of a GPU for the trainer, evaluation and (unless "
        "spec.serving.<model>.gpu_resource says otherwise) served pods: 'nvidia.com/gpu', "
        "'amd.com/gpu', or a MIG profile such as 'nvidia.com/mig-1g.10gb'.",
    )
    service_account: _ObjectName | None = Field(
        default=None,
        description="serviceAccountName of the trainer, evaluation and (unless spec.serving."
        "<model>.service_account says otherwise) served pods; default: the namespace's default.",
    )
    image_pull_secrets: list[_ObjectName] = Field(
        default_factory=list,
        description="Names of Secrets for pulling the images of the trainer, evaluation and "
        "(unless spec.serving.<model>.image_pull_secrets is set) served pods.",
    )
    hf_token: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token for gated models: set as HF_TOKEN "
        "(valueFrom.secretKeyRef) in the trainer and evaluation pods and, unless spec.serving."
        "<model>.hf_token says otherwise, in served models. Never the token itself.",
    )
    hf_endpoint: Annotated[str, AfterValidator(_check_hf_endpoint)] | None = Field(
        default=None,
        description="A Hugging Face Hub mirror (http(s)://host[:port][/path], no credentials), "
        "set as HF_ENDPOINT in the trainer, evaluation and served-model pods. Default: the "
        "platform's (the operator's SARL_HF_ENDPOINT). Without one, pods whose model comes "
        "from s3:// or pvc:// get HF_HUB_OFFLINE=1, so nothing tries the network.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="nodeSelector of the trainer and evaluation pods (and of served models "
        "without their own).",
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Tolerations (core/v1) of the trainer and evaluation pods (and of served "
        "models without their own).",
    )
    backend: Literal["verl", "trl"] = Field(
        default="verl",
        description="Cluster trainer: 'verl' (ppo, grpo, rloo; FSDP2 + vLLM rollouts, Ray) or "
        "'trl' (grpo, rloo; accelerate FSDP2). Local runs always use TRL.",
    )
    trl_vllm: bool = Field(
        default=True,
        description="backend 'trl': generate with vLLM colocated on the training GPUs (TRL's "
        "use_vllm, vllm_mode 'colocate') where the node has a GPU and the image has vLLM; "
        "otherwise, or false, with transformers' generate (several-fold slower). The job logs "
        "which it uses and why. verl always generates with vLLM.",
    )
    image: str | None = Field(
        default=None,
        description="Trainer image for this Experiment; default: the platform's image for "
        "the backend (verl and TRL need separate images).",
    )
    job_kind: Literal["auto", "TrainJob", "PyTorchJob"] = Field(
        default="auto",
        description="Kubeflow job the trainer runs as: 'TrainJob' (Kubeflow Trainer v2, against "
        "the platform chart's ClusterTrainingRuntime), 'PyTorchJob' (Training Operator v1), or "
        "'auto': TrainJob when the cluster serves trainer.kubeflow.org/v1alpha1 TrainJobs, "
        "PyTorchJob otherwise, and PyTorchJob wherever it is served when priority_class is set "
        "(a TrainJob cannot carry it). status.jobKind says which was chosen.",
    )
    queue: _QueueName | None = Field(
        default=None,
        description="Kueue LocalQueue of the training and evaluation jobs (the "
        "kueue.x-k8s.io/queue-name label; the jobs are created suspended and start when Kueue "
        "admits them). Default: the platform chart's kueue.defaultQueue, if set; none: the jobs "
        "are not Kueue-managed.",
    )
    priority_class: _ObjectName | None = Field(
        default=None,
        description="PriorityClass of every trainer and evaluation pod (priorityClassName), and "
        "of the gang's PodGroup where a gang scheduler is configured; Kueue orders its queue by "
        "it too.",
    )

    @field_validator("gpu_memory")
    @classmethod
    def _gpu_memory(cls, v: str) -> str:
        # The plan divides by it and sizes vLLM's share from it: a GPU has at least 1Gi (the
        # smallest MIG slice, 1g.5gb, has 5).
        from sarl.plan.units import parse_quantity

        if parse_quantity(v) < 2**30:
            raise ValueError(f"{v!r} is less than one GPU's memory: give at least 1Gi, e.g. 80Gi")
        return v


class ServedModelSpec(_Strict):
    """A model the operator serves with vLLM on KServe's Hugging Face runtime (cluster only).

    KServe merges the predictor into its ``kserve-huggingfaceserver`` runtime, whose container
    asks for 1 CPU and 2Gi, key by key: the operator therefore always writes cpu, memory and
    GPUs, with requests equal to limits (the scheduler reserves what the model may use), so none
    of the runtime's values survive."""

    gpus: int = Field(
        default=1,
        ge=1,
        description="GPUs (gpu_resource) per replica, as request and limit; more than one "
        "adds --tensor-parallel-size=<gpus>.",
    )
    gpu_resource: _ExtendedResource | None = Field(
        default=None,
        description="Extended resource name of the GPU, e.g. a MIG profile "
        "'nvidia.com/mig-1g.10gb' for a small model. Empty: spec.resources.gpu_resource.",
    )
    service_account: _ObjectName | None = Field(
        default=None,
        description="predictor.serviceAccountName. Empty: spec.resources.service_account.",
    )
    image_pull_secrets: list[_ObjectName] = Field(
        default_factory=list,
        description="predictor.imagePullSecrets (Secret names). Empty: spec.resources."
        "image_pull_secrets.",
    )
    hf_token: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token for a gated model, set as HF_TOKEN "
        "in the runtime container. Empty: spec.resources.hf_token.",
    )
    # No defaults here: each served model sets its own (below); declared here for the order of
    # the fields and so that the builders can read them from either model.
    cpu: str = Field(
        json_schema_extra=_QUANTITY_SCHEMA, description="CPU of the runtime container."
    )
    memory: str = Field(
        json_schema_extra=_QUANTITY_SCHEMA, description="Memory of the runtime container."
    )
    max_model_len: int = Field(ge=1, description="--max_model_len of vLLM.")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="nodeSelector of the predictor pod. Empty: spec.resources.node_selector, so "
        "a GPU node pool chosen for training also holds the served model (there is no way to "
        "ask for no selector while training has one).",
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Tolerations of the predictor pod. Empty: spec.resources.tolerations (as "
        "for node_selector).",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="Extra arguments appended to the runtime's command line, e.g. "
        "--gpu-memory-utilization=0.85 or --dtype=bfloat16. Flags the operator sets "
        "(--model_name, --model_id, --model_dir, --backend, --runner, --max_model_len, "
        "--tensor-parallel-size) are refused.",
    )

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, v: str) -> str:
        if not _QUANTITY.match(v):
            raise ValueError("must be a Kubernetes quantity such as '4', '500m' or '16Gi'")
        return v

    @field_validator("extra_args")
    @classmethod
    def _not_managed(cls, v: list[str]) -> list[str]:
        for arg in v:
            flag = arg.split("=", 1)[0]
            if flag.replace("_", "-") == _TRUST_REMOTE_CODE:
                raise ValueError(
                    f"{arg!r}: --trust-remote-code runs Python from the model's repository "
                    "inside the cluster; a spec may not turn it on. Serve a model whose "
                    "architecture vLLM ships, or have the platform team serve it"
                )
            if flag.startswith("-") and flag.replace("_", "-") in _MANAGED_FLAGS:
                raise ValueError(
                    f"{arg!r}: the operator sets {flag} itself (from the reward's model, "
                    "gpus and max_model_len)"
                )
        return v


class EmbeddingServingSpec(ServedModelSpec):
    """The embedding model (``<name>-embedding``, vLLM ``--runner=pooling``). Defaults: the
    sarl-inference chart's limits for Qwen3-Embedding-0.6B."""

    cpu: str = Field(
        default="4",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="CPU of the runtime container, request and limit (instead of the KServe "
        "runtime's 1 CPU).",
    )
    memory: str = Field(
        default="16Gi",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="Memory of the runtime container, request and limit (instead of the KServe "
        "runtime's 2Gi, in which vLLM is OOM-killed while loading).",
    )
    max_model_len: int = Field(
        default=8192,
        ge=1,
        description="Maximum tokens per input (--max_model_len); one reasoning step is far "
        "shorter, and a smaller value leaves more GPU memory to the KV cache.",
    )


class JudgeServingSpec(ServedModelSpec):
    """The judge / chat model (``<name>-judge``). Defaults: the sarl-inference chart's limits for
    its judge (Qwen3-4B-Instruct)."""

    cpu: str = Field(
        default="8",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="CPU of the runtime container, request and limit (instead of the KServe "
        "runtime's 1 CPU).",
    )
    memory: str = Field(
        default="32Gi",
        json_schema_extra=_QUANTITY_SCHEMA,
        description="Memory of the runtime container, request and limit (instead of the KServe "
        "runtime's 2Gi, in which vLLM is OOM-killed while loading).",
    )
    max_model_len: int = Field(
        default=16384,
        ge=1,
        description="Context length (--max_model_len): prompt, response and the judge's "
        "instructions must fit.",
    )


class ServingSpec(_Strict):
    """Cluster only: how the operator serves the models the rewards name without a URL."""

    embedding: EmbeddingServingSpec = Field(
        default_factory=EmbeddingServingSpec,
        description="InferenceService <name>-embedding (an openai embedder with an empty url).",
    )
    judge: JudgeServingSpec = Field(
        default_factory=JudgeServingSpec,
        description="InferenceService <name>-judge (a chat endpoint with a model and no url).",
    )
    deployment_mode: Literal["RawDeployment", "Serverless"] = Field(
        default="RawDeployment",
        description="KServe deployment mode of the served models (annotation "
        "serving.kserve.io/deploymentMode). RawDeployment: a Deployment and Service, no Knative "
        "needed; placement (node_selector, tolerations) works as written. Serverless: a Knative "
        "Service, whose webhook refuses a nodeSelector or tolerations unless the flags "
        "kubernetes.podspec-nodeselector / kubernetes.podspec-tolerations are enabled in the "
        "config-features ConfigMap of knative-serving (list them in knative_features). KServe "
        ">= 0.16 calls these Standard and Knative and rewrites the old names.",
    )
    knative_features: list[str] = Field(
        default_factory=list,
        description="Serverless only: the Knative Serving feature flags the cluster enables "
        "(config-features in knative-serving), e.g. kubernetes.podspec-nodeselector; the "
        "operator refuses a predictor field whose flag is disabled by default and not listed.",
    )
    release: Literal["on_completion", "never"] = Field(
        default="on_completion",
        description="When the operator deletes the InferenceServices it serves for this run: "
        "on_completion, once training has ended and the evaluation Job (if any) has too, so "
        "their GPUs go back to the cluster; never, kept until the Experiment is deleted. A "
        "Study's shared models are released when no unfinished run of the Study needs them.",
    )

    @field_validator("knative_features")
    @classmethod
    def _knative_flag_names(cls, v: list[str]) -> list[str]:
        for flag in v:
            if not _KNATIVE_FLAG.match(flag):
                raise ValueError(
                    f"{flag!r}: not a Knative Serving pod-spec feature flag; write it as in "
                    "config-features, e.g. kubernetes.podspec-nodeselector"
                )
        return v
