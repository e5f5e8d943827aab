"""The models the operator serves for an Experiment's rewards, as KServe InferenceServices.

Called by ``builders`` (the served URLs in the rendered config), ``experiment_handlers`` and
``experiment_conditions`` (:func:`inference_services`, :func:`fill_judge_urls`) and
``study_builders`` (a Study's shared embedding service: :func:`embedding_service`,
:func:`point_embedders`, :func:`predictor_url`). Pure: plain dicts out.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sarl.cluster.tenancy import TENANT_SECRET, TenantKeys
from sarl.integrations.cluster import chat_endpoints, fill_chat_urls, served_embedders
from sarl.spec.cluster_fields import ResourcesSpec, ServedModelSpec
from sarl.spec.experiment import Experiment
from sarl.spec.model_source import ModelUri
from sarl_operator import job_pods, knative, model_sources, pod_security
from sarl_operator.child_meta import embedding_name, judge_name, meta
from sarl_operator.job_pods import hf_token_env
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform

#: The ``--model_name`` the served embedding model answers to (the rendered spec's
#: ``embedder.model``, :func:`point_embedders`).
EMBEDDING_MODEL_NAME: Final = "embedding"
#: The ``--model_name`` the served judge answers to (the rendered spec's endpoint ``model``).
JUDGE_MODEL_NAME: Final = "judge"
#: What the served model's server reads its API key from: sarl's own services
#: (``sarl_services.api_key``) and vLLM's OpenAI server (``--api-key`` or ``VLLM_API_KEY``).
SERVING_KEY_ENV: Final = (TenantKeys.SERVING_API_KEY, "VLLM_API_KEY")


def serving_key_env(platform: Platform) -> list[dict[str, Any]]:
    """The tenant's served-model API key (:data:`~sarl.cluster.tenancy.TENANT_SECRET` key
    ``SARL_SERVING_API_KEY``, which its trainer pods send as a Bearer token) under the names of
    :data:`SERVING_KEY_ENV`; nothing on a platform without tenants. KServe v0.17.0's Hugging
    Face runtime serves vLLM's classes inside KServe's own app
    (python/huggingfaceserver/huggingfaceserver/vllm/vllm_model.py) without vLLM's
    authentication middleware, so there the key is not enforced and the Experiment's
    NetworkPolicy (:mod:`sarl_operator.network_policies`) is what keeps other pods out."""
    if not platform.tenancy.enabled:
        return []
    ref = {"name": TENANT_SECRET, "key": TenantKeys.SERVING_API_KEY}
    return [{"name": name, "valueFrom": {"secretKeyRef": dict(ref)}} for name in SERVING_KEY_ENV]


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


def _vllm_isvc(
    metadata: dict[str, Any],
    model_name: str,
    source: ModelUri,
    served: ServedModelSpec,
    res: ResourcesSpec,
    task_args: list[str],
    hf_endpoint: str = "",
    key_env: list[dict[str, Any]] | None = None,
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
            # Strategic-merged over the runtime container's own (no seccomp at v0.17.0): the Pod
            # Security Standard restricted, on the container alone (Knative refuses it on the pod).
            "securityContext": pod_security.predictor_container_context(),
        },
    }
    # A gated model: the runtime downloads it with huggingface_hub, which reads HF_TOKEN; the
    # Hub's mirror, or offline for a model from the store.
    env = hf_token_env(served.hf_token or res.hf_token)
    env += model_sources.hub_env(source, res.hf_endpoint or hf_endpoint)
    env += key_env or []
    if env:
        predictor["model"]["env"] = env
    # PredictorSpec inlines a PodSpec (KServe's predictor.go): pod fields sit on the predictor.
    service_account = served.service_account or res.service_account
    if service_account:
        predictor["serviceAccountName"] = service_account
    predictor.update(pod_security.token_mount(service_account))
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
        metadata, EMBEDDING_MODEL_NAME, source, served, exp.spec.resources,
        ["--runner=pooling"], platform.hf_endpoint, serving_key_env(platform),
    )  # fmt: skip
    isvc = model_sources.with_storage(isvc, source, _credentials_secret(exp, namespace, platform))
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
        metadata, JUDGE_MODEL_NAME, source, served, exp.spec.resources, [], platform.hf_endpoint,
        serving_key_env(platform),
    )  # fmt: skip
    isvc = model_sources.with_storage(isvc, source, _credentials_secret(exp, namespace, platform))
    return _with_deployment_mode(exp, isvc, "judge")


def _credentials_secret(exp: Experiment, namespace: str, platform: Platform) -> str:
    """The S3 credentials Secret of the Experiment's pods (as ``job_pods.job_env``; its keys
    are the ones KServe's storage initializer reads)."""
    return job_pods.store_credentials(exp, namespace, platform)[0]


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
        emb["model"] = EMBEDDING_MODEL_NAME
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
