"""Typed models of the Experiment document — the single source of truth.

Read by the loader (YAML / dict -> validated model), the local runner, the operator (later) and
the schema generator (JSON schema for editors, CRD OpenAPI schema). Every field says what it
means; cross-field rules live in validators here, not in the consumers. The cluster-only fields
(``spec.resources``, ``spec.serving``) are in :mod:`sarl.spec.cluster_fields`.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from sarl.spec.cluster_fields import ResourcesSpec, ServingSpec
from sarl.spec.model_source import ModelUriError, parse_model_uri
from sarl.spec.secrets import refuse_secrets
from sarl.spec.strict import _Strict
from sarl.spec.suggest import FieldError

API_VERSION: Final = "sarl.dev/v1alpha1"
KIND: Final = "Experiment"
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: DNS-1035 label: what the Training Operator's and KServe's webhooks require of a job or
#: InferenceService name (a Service name), so an Experiment name starts with a letter.
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class Metadata(_Strict):
    """Name, namespace and labels of the document, as in a Kubernetes object."""

    name: str = Field(
        description="Experiment name (DNS-1035 label: lowercase letters, digits and '-', "
        "starting with a letter): names the MLflow experiment, checkpoint prefix and, on a "
        "cluster, the Kubernetes objects (whose longest child name must fit in 63 characters)."
    )
    namespace: str | None = Field(default=None, description="Kubernetes namespace (cluster only).")
    labels: dict[str, str] = Field(default_factory=dict, description="Kubernetes labels (cluster).")

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

    hidden_size: int = Field(default=64, ge=8, description="Hidden (embedding) width.")
    num_layers: int = Field(default=2, ge=1, description="Transformer layers.")
    num_heads: int = Field(default=4, ge=1, description="Attention (query) heads.")
    num_kv_heads: int = Field(default=2, ge=1, description="Key/value heads (GQA).")
    intermediate_size: int = Field(default=128, ge=8, description="MLP inner width.")
    vocab_size: int = Field(default=384, ge=64, description="Tokenizer vocabulary size (BPE).")


class WarmStart(_Strict):
    """Supervised warm start on synthetic structured traces before RL (built-in model only)."""

    steps: int = Field(default=300, ge=0, description="SFT optimizer steps (0 disables).")
    learning_rate: float = Field(default=3e-3, gt=0, description="SFT learning rate.")
    batch_size: int = Field(default=16, ge=1, description="Traces per SFT step.")
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
    """The policy to train: which model, and the built-in one's shape and warm start."""

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
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32", description="Training precision of the policy."
    )

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
    """The prompts: a built-in task generator or a dataset file, and the prompt template."""

    task: Literal["arithmetic", "countdown", "dataset"] = Field(
        default="arithmetic",
        description="Built-in verifiable task generator, or 'dataset' to read `dataset`.",
    )
    dataset: str | None = Field(
        default=None,
        description="task=dataset: a JSONL/Parquet file (local path or s3://) with columns "
        "`question` and `answer` (or the names in `question_field`/`answer_field`).",
    )
    question_field: str = Field(default="question", description="Question column of `dataset`.")
    answer_field: str = Field(default="answer", description="Answer column of `dataset`.")
    train_size: int = Field(default=256, ge=1, description="Training prompts (generated tasks).")
    eval_size: int = Field(default=32, ge=1, description="Held-out evaluation prompts.")
    split_seed: int = Field(default=1234, description="Seed of generation and of the split.")
    difficulty: int = Field(default=3, ge=1, le=6, description="Operations per generated problem.")
    prompt_template: str = Field(
        default="{question} Think step by step and put the final answer in \\boxed{{}}.",
        description="Python format string with a {question} field.",
    )
    shuffle: bool = Field(default=False, description="Shuffle the training prompts each epoch.")

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
    """The RL algorithm and its batch, length and optimizer settings."""

    name: Literal["grpo", "rloo", "ppo"] = Field(
        default="grpo", description="Advantage estimator; ppo (GAE, a critic) needs verl."
    )
    rollouts_per_prompt: int = Field(default=8, ge=2, description="N responses per prompt.")
    learning_rate: float = Field(default=1e-6, gt=0, description="Actor learning rate.")
    critic_learning_rate: float = Field(default=1e-5, gt=0, description="PPO critic only.")
    kl_coef: float = Field(default=0.001, ge=0, description="KL loss coefficient (beta).")
    kl_type: Literal["low_var_kl", "k1", "k2", "k3", "abs", "mse"] = Field(
        default="low_var_kl", description="KL estimator (verl's kl_loss_type; local TRL: k3)."
    )
    entropy_coef: float = Field(default=0.0, ge=0, description="Entropy bonus coefficient.")
    max_prompt_length: int = Field(default=1024, ge=1, description="Prompt tokens, at most.")
    max_response_length: int = Field(default=8192, ge=1, description="Response tokens, at most.")
    temperature: float = Field(default=1.0, gt=0, description="Rollout sampling temperature.")
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
    epochs: int = Field(default=15, ge=1, description="Passes over the training prompts.")
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many steps.")
    seed: int = Field(default=0, description="RL seed (sampling, shuffling); a Study's seeds.")

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
    """One term of the reward: a registered reward, its weight and its settings."""

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
    """Periodic evaluation of the policy on held-out problems and benchmarks."""

    benchmarks: list[str] = Field(
        default_factory=lambda: ["heldout"],
        description="'heldout' "
        "(the task's held-out split); cluster: math500, aime25, amc23, "
        "minerva.",
    )
    k: int = Field(default=4, ge=1, description="Samples per problem for avg@k and pass@k.")
    every_n_steps: int = Field(default=5, ge=1, description="Evaluate every N training steps.")
    temperature: float = Field(default=0.6, gt=0, description="Sampling temperature.")
    max_problems: int | None = Field(
        default=None, ge=1, description="Problems per benchmark, at most (default: all)."
    )


class TrackingSpec(_Strict):
    """Where and how the run is logged (MLflow)."""

    mlflow_uri: str | None = Field(
        default=None,
        description="MLflow tracking URI; default a "
        "local store under ./.sarl/ (sqlite + artifact folder).",
    )
    experiment_name: str | None = Field(default=None, description="Default: metadata.name.")
    tags: dict[str, str] = Field(default_factory=dict, description="MLflow run tags.")
    log_maps_every_n_steps: int = Field(
        default=5, ge=1, description="Reasoning-map PNGs of sample responses every N steps."
    )


class StorageSpec(_Strict):
    """Where checkpoints go (S3/MinIO or a local path), how often, how many are kept."""

    checkpoint_uri: str | None = Field(
        default=None,
        description="'s3://bucket/prefix' or a local path; default ./.sarl/checkpoints/<name>.",
    )
    every_n_steps: int = Field(default=20, ge=1, description="Checkpoint every N steps.")
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


class ExperimentSpec(_Strict):
    """What to train, on what, with which reward, and where it runs."""

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
        default_factory=lambda: [RewardTerm(name="structure")],
        min_length=1,
        description="Reward terms, summed with their weights (default: the structure reward).",
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
    """A structure-aware RL training experiment (sarl.spec.experiment)."""

    apiVersion: Literal["sarl.dev/v1alpha1"] = Field(
        default=API_VERSION, description="Always sarl.dev/v1alpha1."
    )
    kind: Literal["Experiment"] = Field(default=KIND, description="Always Experiment.")
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
