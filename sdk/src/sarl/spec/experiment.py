"""Typed models of the Experiment document — the single source of truth.

Read by the loader (YAML / dict -> validated model), the local runner, the operator (later) and
the schema generator (JSON schema for editors, CRD OpenAPI schema). Every field says what it
means; cross-field rules live in validators here, not in the consumers.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from sarl.spec.model_source import ModelUriError, check_http_url, parse_model_uri
from sarl.spec.secrets import refuse_secrets
from sarl.spec.suggest import FieldError

API_VERSION: Final = "sarl.dev/v1alpha1"
KIND: Final = "Experiment"
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: DNS-1035 label: what the Training Operator's and KServe's webhooks require of a job or
#: InferenceService name (a Service name), so an Experiment name starts with a letter.
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
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


class _Strict(BaseModel):
    # hide_input_in_errors: str(ValidationError) would print the offending input, which may be a
    # credential; the loader prints it from .errors(), redacted (sarl.spec.secrets).
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class Metadata(_Strict):
    name: str = Field(
        description="Experiment name (DNS-1035 label: lowercase letters, digits and '-', "
        "starting with a letter): names the MLflow experiment, checkpoint prefix and, on a "
        "cluster, the Kubernetes objects (whose longest child name must fit in 63 characters)."
    )
    namespace: str | None = Field(default=None, description="Kubernetes namespace (cluster only).")
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        if len(v) > 63 or not _DNS1035.match(v):
            raise ValueError(
                "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a "
                "letter and ending with a letter or digit, at most 63 characters (the Training "
                "Operator and KServe refuse other job and InferenceService names)"
            )
        return v


class TinyModel(_Strict):
    """The built-in small Qwen-architecture policy, trained from scratch on the task corpus."""

    hidden_size: int = Field(default=64, ge=8)
    num_layers: int = Field(default=2, ge=1)
    num_heads: int = Field(default=4, ge=1)
    num_kv_heads: int = Field(default=2, ge=1)
    intermediate_size: int = Field(default=128, ge=8)
    vocab_size: int = Field(default=384, ge=64, description="Tokenizer vocabulary size (BPE).")


class WarmStart(_Strict):
    """Supervised warm start on synthetic structured traces before RL (built-in model only)."""

    steps: int = Field(default=300, ge=0, description="SFT optimizer steps (0 disables).")
    learning_rate: float = Field(default=3e-3, gt=0)
    batch_size: int = Field(default=16, ge=1)
    max_response_tokens: int | None = Field(
        default=None,
        ge=8,
        description="Length cap of the warm-start traces (tokens, end-of-sequence included); "
        "default: the RL budget algorithm.max_response_length. A larger cap teaches traces "
        "longer than RL may write, which RL then has to learn to shorten.",
    )
    seed: int = Field(
        default=0,
        description="Seed of the built-in policy's initialisation and warm start: the "
        "'pretrained model'. RL seeds (algorithm.seed) start from the same warm start, as runs "
        "from one checkpoint do; change this to vary the starting policy too.",
    )


class ModelSpec(_Strict):
    name: str = Field(
        default="builtin:tiny-qwen",
        description="'builtin:tiny-qwen' (no download: built and warm-started locally), a local "
        "Hugging Face model directory, a Hub id ('org/name' or 'hf://org/name'; cluster jobs "
        "download it, from spec.resources.hf_endpoint if set), 's3://bucket/prefix' (a model "
        "directory in the object store, written by `sarl models copy`; cluster jobs download it "
        "to their scratch volume) or 'pvc://claim/path' (a PersistentVolumeClaim in the "
        "Experiment's namespace, mounted read-only).",
    )
    tiny: TinyModel = Field(default_factory=TinyModel)
    warm_start: WarmStart = Field(default_factory=WarmStart)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"

    @property
    def is_builtin(self) -> bool:
        return self.name.startswith("builtin:")

    @field_validator("name")
    @classmethod
    def _builtin_known(cls, v: str) -> str:
        if v.startswith("builtin:") and v != "builtin:tiny-qwen":
            raise ValueError("unknown built-in model; the built-in model is 'builtin:tiny-qwen'")
        if not v.strip():
            raise ValueError("must not be empty")
        try:  # hf://, s3://, pvc:// checked here, never fetched
            parse_model_uri(v, "spec.model.name")
        except ModelUriError as e:
            raise ValueError(e.reason) from e  # pydantic names the field
        return v


class DataSpec(_Strict):
    task: Literal["arithmetic", "countdown", "dataset"] = Field(
        default="arithmetic",
        description="Built-in verifiable task generator, or 'dataset' to read `dataset`.",
    )
    dataset: str | None = Field(
        default=None,
        description="task=dataset: a JSONL/Parquet file (local path or s3://) with columns "
        "`question` and `answer` (or the names in `question_field`/`answer_field`).",
    )
    question_field: str = "question"
    answer_field: str = "answer"
    train_size: int = Field(default=256, ge=1, description="Training prompts (generated tasks).")
    eval_size: int = Field(default=32, ge=1, description="Held-out evaluation prompts.")
    split_seed: int = Field(default=1234, description="Seed of generation and of the split.")
    difficulty: int = Field(default=3, ge=1, le=6, description="Operations per generated problem.")
    prompt_template: str = Field(
        default="{question} Think step by step and put the final answer in \\boxed{{}}.",
        description="Python format string with a {question} field.",
    )
    shuffle: bool = False

    @field_validator("prompt_template")
    @classmethod
    def _has_question(cls, v: str) -> str:
        if "{question}" not in v:
            raise ValueError("must contain the {question} placeholder")
        try:
            v.format(question="q")
        except (IndexError, KeyError, ValueError) as e:
            raise ValueError(f"is not a valid format string: {e}") from e
        return v

    @model_validator(mode="after")
    def _dataset_given(self) -> DataSpec:
        if self.task == "dataset" and not self.dataset:
            raise ValueError("dataset: required when task is 'dataset'")
        return self


class AlgorithmSpec(_Strict):
    name: Literal["grpo", "rloo", "ppo"] = "grpo"
    rollouts_per_prompt: int = Field(default=8, ge=2, description="N responses per prompt.")
    learning_rate: float = Field(default=1e-6, gt=0, description="Actor learning rate.")
    critic_learning_rate: float = Field(default=1e-5, gt=0, description="PPO critic only.")
    kl_coef: float = Field(default=0.001, ge=0, description="KL loss coefficient (beta).")
    kl_type: Literal["low_var_kl", "k1", "k2", "k3", "abs", "mse"] = "low_var_kl"
    entropy_coef: float = Field(default=0.0, ge=0)
    max_prompt_length: int = Field(default=1024, ge=1)
    max_response_length: int = Field(default=8192, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    train_batch_size: int = Field(default=256, ge=1, description="Prompts per training step.")
    mini_batch_size: int = Field(default=256, ge=1, description="Prompts per policy update.")
    micro_batch_size_per_gpu: int = Field(
        default=32,
        ge=1,
        description="Responses per GPU per forward pass of the policy update and the log-prob "
        "passes, when max_tokens_per_gpu is not set.",
    )
    max_tokens_per_gpu: int | None = Field(
        default=None,
        ge=1,
        description="Dynamic batching (verl: use_dynamic_bsz with ppo_max_token_len_per_gpu and "
        "log_prob_max_token_len_per_gpu): each forward pass packs responses up to this many "
        "tokens per GPU instead of micro_batch_size_per_gpu responses, which bounds the logits "
        "(tokens x vocabulary) whatever the response length. At least max_prompt_length + "
        "max_response_length. `sarl plan` shows what it costs in GPU memory. The TRL "
        "trainer, which batches by responses, takes as many longest sequences as fit in it "
        "(at most micro_batch_size_per_gpu).",
    )
    rollout_gpu_memory_utilization: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="Share of each GPU's memory vLLM takes for generation (weights and KV cache; "
        "verl's rollout.gpu_memory_utilization). The trainer's own state stays on the GPU beside "
        "it, so both must fit: `sarl plan` checks it.",
    )
    epochs: int = Field(default=15, ge=1)
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many steps.")
    seed: int = 0

    @property
    def responses_per_pass(self) -> int:
        """Responses per GPU per forward pass on a trainer that batches by responses (TRL):
        ``micro_batch_size_per_gpu``, capped by as many longest sequences as
        ``max_tokens_per_gpu`` holds (so the paper presets' budget bounds TRL's logits too)."""
        if self.max_tokens_per_gpu is None:
            return self.micro_batch_size_per_gpu
        longest = self.max_prompt_length + self.max_response_length
        return max(1, min(self.micro_batch_size_per_gpu, self.max_tokens_per_gpu // longest))

    @model_validator(mode="after")
    def _batches(self) -> AlgorithmSpec:
        if self.mini_batch_size > self.train_batch_size:
            raise ValueError(
                f"mini_batch_size: {self.mini_batch_size} exceeds train_batch_size "
                f"{self.train_batch_size}"
            )
        longest = self.max_prompt_length + self.max_response_length
        if self.max_tokens_per_gpu is not None and self.max_tokens_per_gpu < longest:
            # verl would still run a longer response alone in its micro-batch, over the budget
            # the memory plan counted on: refuse the budget instead.
            raise ValueError(
                f"max_tokens_per_gpu: {self.max_tokens_per_gpu} is below max_prompt_length + "
                f"max_response_length ({longest}); one response must fit in a forward pass: set "
                f"it to at least {longest}"
            )
        return self


class RewardTerm(_Strict):
    name: str = Field(
        description="Registered reward name (see `sarl rewards`) or 'package.module:Class'."
    )
    weight: float = Field(default=1.0, description="Weight in the summed reward.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Typed settings of that reward, validated against its Settings model.",
    )

    @model_validator(mode="after")
    def _known(self) -> RewardTerm:
        from sarl.rewards.registry import parse_settings

        parse_settings(self.name, self.settings)  # raises RewardConfigError naming the field
        return self


class EvaluationSpec(_Strict):
    benchmarks: list[str] = Field(
        default_factory=lambda: ["heldout"],
        description="'heldout' "
        "(the task's held-out split); cluster: math500, aime25, amc23, "
        "minerva.",
    )
    k: int = Field(default=4, ge=1, description="Samples per problem for avg@k and pass@k.")
    every_n_steps: int = Field(default=5, ge=1)
    temperature: float = Field(default=0.6, gt=0)
    max_problems: int | None = Field(default=None, ge=1)


class TrackingSpec(_Strict):
    mlflow_uri: str | None = Field(
        default=None,
        description="MLflow tracking URI; default a "
        "local store under ./.sarl/ (sqlite + artifact folder).",
    )
    experiment_name: str | None = Field(default=None, description="Default: metadata.name.")
    tags: dict[str, str] = Field(default_factory=dict)
    log_maps_every_n_steps: int = Field(
        default=5, ge=1, description="Reasoning-map PNGs of sample responses every N steps."
    )


class StorageSpec(_Strict):
    checkpoint_uri: str | None = Field(
        default=None,
        description="'s3://bucket/prefix' or a local path; default ./.sarl/checkpoints/<name>.",
    )
    every_n_steps: int = Field(default=20, ge=1)
    endpoint_url: str | None = Field(
        default=None,
        description="S3/MinIO endpoint, e.g. "
        "http://minio:9000 (credentials from AWS_ACCESS_KEY_ID/"
        "AWS_SECRET_ACCESS_KEY or the secret reference).",
    )
    credentials_secret: str | None = Field(
        default=None, description="Cluster: name of the Secret holding the S3 credentials."
    )
    keep_last: int = Field(default=3, ge=1, description="Complete checkpoints to keep.")


#: A Kubernetes resource quantity as the serving fields accept it ("4", "500m", "16Gi").
_QUANTITY: Final = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# In the JSON schema and the CRD (the API server checks it too); the validator below words the
# error for people.
_QUANTITY_SCHEMA: Final[dict[str, Any]] = {"pattern": _QUANTITY.pattern}
#: A Knative Serving feature flag that gates a pod-spec or container-spec field.
_KNATIVE_FLAG: Final = re.compile(r"^kubernetes\.(podspec|containerspec)-[a-z-]+$")
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

    cpu: _Quantity = Field(default="8", json_schema_extra=_QUANTITY_SCHEMA)
    memory: _Quantity = Field(default="64Gi", json_schema_extra=_QUANTITY_SCHEMA)
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

    nodes: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=8, ge=0)
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
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
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


class ExperimentSpec(_Strict):
    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        """Merge the named preset under the given fields (user fields win). Works for YAML
        dicts and for Python objects: only fields the user set explicitly override the preset."""
        if not isinstance(data, dict) or not data.get("preset"):
            return data
        from sarl.spec.presets import deep_merge, preset

        given = {k: _explicit(v) for k, v in data.items()}
        return deep_merge(preset(str(data["preset"])), given)

    # Defined after _apply_preset so that it runs first (pydantic runs "before" validators last
    # defined first): nothing may echo a credential before this refuses it.
    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        refuse_secrets(data)  # SecretInSpecError naming the field, never the value
        return data

    preset: str | None = Field(
        default=None,
        description="Named preset applied under this spec "
        "(see `sarl presets`); fields given here override it.",
    )
    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    reward: list[RewardTerm] = Field(
        default_factory=lambda: [RewardTerm(name="structure")], min_length=1
    )
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    serving: ServingSpec = Field(
        default_factory=ServingSpec,
        description="Cluster only: resources, placement and vLLM limits of the InferenceServices "
        "the operator creates for the rewards; ignored by local runs.",
    )

    @model_validator(mode="after")
    def _backend_runs_algorithm(self) -> ExperimentSpec:
        # PPO needs a critic (GAE), which only the verl trainer has.
        if self.resources.backend == "trl" and self.algorithm.name == "ppo":
            raise FieldError(
                ("resources", "backend"),
                "trl",
                "the TRL trainer trains grpo and rloo only; algorithm 'ppo' (GAE with a critic) "
                "needs backend 'verl': set spec.resources.backend: verl, or "
                "spec.algorithm.name: grpo",
            )
        return self

    @model_validator(mode="after")
    def _vote_set_holds_the_group(self) -> ExperimentSpec:
        _check_vote_sets(self.reward, self.algorithm.rollouts_per_prompt)
        return self

    @property
    def votes_per_prompt(self) -> int | None:
        """Responses drawn per prompt when a group reward votes over more than the trained
        group (TTRL's ``votes_per_prompt``), of which ``algorithm.rollouts_per_prompt`` are
        trained on; None when the trained group is all there is."""
        sizes = _vote_set_sizes(self.reward)
        size = max(sizes.values(), default=None)
        return size if size is not None and size > self.algorithm.rollouts_per_prompt else None


def _vote_set_sizes(terms: list[RewardTerm]) -> dict[int, int]:
    """Term index -> the vote set its reward asks for (``Reward.vote_set_size``), where set."""
    from sarl.rewards.registry import get_reward_class, parse_settings

    sizes: dict[int, int] = {}
    for i, term in enumerate(terms):
        size = get_reward_class(term.name).vote_set_size(parse_settings(term.name, term.settings))
        if size is not None:
            sizes[i] = size
    return sizes


def _check_vote_sets(terms: list[RewardTerm], group: int) -> None:
    """A vote set holds the trained group; one reward draws it, and no other group reward
    shares the run (it would score the trained group on TRL but the vote set on verl)."""
    from sarl.rewards.registry import get_reward_class

    sizes = _vote_set_sizes(terms)
    for i, size in sizes.items():
        if size < group:
            raise FieldError(
                ("reward", i, "settings", "votes_per_prompt"),
                size,
                f"must be at least spec.algorithm.rollouts_per_prompt ({group}): the vote set "
                f"holds the {group} trained responses plus extra ones drawn for the vote; set "
                f"votes_per_prompt >= {group} (TTRL's recipe: 64 votes for 32 trained) or leave "
                "it out to vote within the trained group",
            )
    voters = [i for i, size in sizes.items() if size > group]
    if not voters:
        return
    for j, term in enumerate(terms):
        if j != voters[0] and (j in voters or get_reward_class(term.name).needs_group):
            raise FieldError(
                ("reward", j, "name"),
                term.name,
                f"spec.reward[{voters[0]}] votes over {sizes[voters[0]]} responses per prompt "
                f"(votes_per_prompt > rollouts_per_prompt {group}); another group reward in "
                "the same run would score the trained group on TRL but the vote set on verl: "
                "run it in its own Experiment, or drop votes_per_prompt",
            )


def _explicit(value: Any) -> Any:
    """Only the explicitly set fields of nested models, so defaults do not mask a preset."""
    if isinstance(value, BaseModel):
        return {k: _explicit(v) for k, v in value.model_dump(exclude_unset=True).items()}
    if isinstance(value, list):
        return [_explicit(v) for v in value]
    return value


class Experiment(_Strict):
    apiVersion: Literal["sarl.dev/v1alpha1"] = API_VERSION
    kind: Literal["Experiment"] = KIND
    metadata: Metadata
    spec: ExperimentSpec = Field(default_factory=ExperimentSpec)

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        """Refuse credentials anywhere in the document (sarl.spec.secrets), before any field
        is validated, so that no other error can echo one; the path starts at the root."""
        refuse_secrets(data)
        return data

    @property
    def name(self) -> str:
        return self.metadata.name
