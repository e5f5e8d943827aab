"""What the operator and the cluster client share about running an Experiment on a cluster.

* :func:`check_cluster`: can the chosen trainer run this spec? Called by the operator's reconcile
  (a spec the trainer would refuse ends Failed at once, naming the field, instead of a PyTorchJob
  that crashes and restarts) and by ``sarl.Client().submit`` (the same refusal before the
  request). The checks are the trainers' own mappings —
  :func:`sarl.integrations.verl.config.verl_overrides` and
  :func:`sarl.integrations.trl_cluster.cluster_overrides` — called with the job's shape, so what
  is accepted here is what the job accepts.
* :func:`child_names` / :func:`check_names`: the names of the objects a cluster run creates
  (``<name>-config``, the PyTorchJob's ``<name>-master-0``/``<name>-worker-<i>`` pods and
  Services, ``<name>-eval``, the InferenceServices' ``<name>-embedding-predictor`` and
  ``<name>-judge-predictor`` Services). The operator's builders name their children with these
  suffixes; :func:`check_cluster` refuses an Experiment whose longest child name would exceed a
  Kubernetes name (63 characters): the Training Operator and KServe accept the parent and then
  fail to create its Services.
* :func:`chat_endpoints` / :func:`fill_chat_urls`: the chat-model endpoints of the rewards
  (structured_qa's judge, rlkd's decomposer and judge). One given with a model and no URL is
  served by the operator (a ``<name>-judge`` InferenceService), so its URL is filled in before the
  spec is validated (the rewards refuse an endpoint without one).

Pure: no trainer, no Kubernetes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from sarl.integrations.trl_cluster import check_supported, cluster_overrides
from sarl.integrations.verl.config import verl_overrides
from sarl.spec.experiment import Experiment

#: Suffixes of an Experiment's children (the operator's builders use these).
CONFIG_SUFFIX: Final = "-config"
EMBEDDING_SUFFIX: Final = "-embedding"
JUDGE_SUFFIX: Final = "-judge"
EVAL_SUFFIX: Final = "-eval"
#: KServe names a predictor's Deployment/Service (RawDeployment) or Knative Service and route
#: host label (Serverless) ``<isvc>-predictor`` (``constants.PredictorServiceName``).
PREDICTOR_SUFFIX: Final = "-predictor"
MAX_NAME: Final = 63


def served_embedders(exp: Experiment) -> list[tuple[int, str]]:
    """(reward index, model id) of each ``openai`` embedder with an empty ``url``: the operator
    serves those (one ``<name>-embedding`` InferenceService)."""
    out: list[tuple[int, str]] = []
    for i, term in enumerate(exp.spec.reward):
        emb = term.settings.get("embedder")
        if isinstance(emb, Mapping) and emb.get("kind") == "openai" and not emb.get("url"):
            out.append((i, str(emb.get("model") or "")))
    return out


def child_names(exp: Experiment) -> list[tuple[str, str]]:
    """(what, name) of every object a cluster run of ``exp`` creates, pods' Services included.

    Conservative where the spec alone cannot tell: any chat endpoint counts as a served judge,
    and the evaluation Job is always counted (both are shorter than the embedding predictor)."""
    name, nodes = exp.name, exp.spec.resources.nodes
    out = [
        ("ConfigMap", f"{name}{CONFIG_SUFFIX}"),
        # Training Operator: pod and headless Service per replica (replicaName in envvar.go).
        ("PyTorchJob Master pod/Service", f"{name}-master-0"),
        ("evaluation Job", f"{name}{EVAL_SUFFIX}"),
    ]
    if nodes > 1:
        out.append(("PyTorchJob Worker pod/Service", f"{name}-worker-{nodes - 2}"))
    # Kubeflow Trainer v2 (TrainJob): the JobSet's Job <name>-node-0 and its Indexed pods'
    # hostnames <job>-<index>, a DNS label (JobSet v0.12.0, the Job controller).
    out.append(("TrainJob node pod hostname", f"{name}-node-0-{nodes - 1}"))
    if served_embedders(exp):
        out.append(("embedding predictor Service", f"{name}{EMBEDDING_SUFFIX}{PREDICTOR_SUFFIX}"))
    reward = [term.model_dump(mode="json") for term in exp.spec.reward]
    if chat_endpoints(reward):
        out.append(("judge predictor Service", f"{name}{JUDGE_SUFFIX}{PREDICTOR_SUFFIX}"))
    return out


def check_names(exp: Experiment) -> None:
    """Raise ValueError naming ``metadata.name`` when a child's name would be too long."""
    what, longest = max(child_names(exp), key=lambda item: len(item[1]))
    if len(longest) > MAX_NAME:
        room = MAX_NAME - (len(longest) - len(exp.name))
        raise ValueError(
            f"metadata.name={exp.name!r} ({len(exp.name)} characters): its {what} would be "
            f"named {longest!r} ({len(longest)} characters, Kubernetes allows {MAX_NAME}); "
            f"use at most {room} characters for this Experiment"
        )


def check_cluster(exp: Experiment) -> None:
    """Raise ValueError naming the field when ``spec.resources.backend`` cannot run ``exp``, or
    when a child object's name would not be a valid Kubernetes name. Its callers check the
    resource plan next (:func:`sarl.plan.check_plan`)."""
    check_names(exp)
    res = exp.spec.resources
    if res.backend == "trl":
        check_supported(exp)
        cluster_overrides(exp, res.nodes * max(res.gpus_per_node, 1))
        return
    verl_overrides(
        exp,
        # Paths the job fills in at start; their values do not affect the checks.
        train_files="train.parquet",
        val_files="val.parquet",
        n_gpus_per_node=res.gpus_per_node,
        nnodes=res.nodes,
        model_path="built-in" if exp.spec.model.is_builtin else None,
    )


#: Reward name -> the settings keys holding an OpenAI-chat endpoint ({url, model, ...}).
CHAT_ENDPOINTS: Final[Mapping[str, tuple[str, ...]]] = {
    "structured_qa": ("judge_client",),
    "rlkd": ("decomposer", "judge"),
}


def chat_endpoints(reward: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """(field path, endpoint dict) of every chat endpoint in raw ``spec.reward`` entries."""
    out: list[tuple[str, dict[str, Any]]] = []
    for i, term in enumerate(reward):
        if not isinstance(term, dict) or not isinstance(term.get("settings"), dict):
            continue
        settings = term["settings"]
        if term.get("name") == "structured_qa" and settings.get("judge") is False:
            continue  # R_verif only: the judge endpoint is not called
        for key in CHAT_ENDPOINTS.get(str(term.get("name")), ()):
            endpoint = settings.get(key)
            if isinstance(endpoint, dict):
                out.append((f"spec.reward[{i}].settings.{key}", endpoint))
    return out


def fill_chat_urls(spec: Mapping[str, Any], url: str) -> dict[str, Any]:
    """A copy of the raw ``spec`` (preset applied) in which each chat endpoint with a model and
    no url gets ``url``; an unknown preset is left for validation to report."""
    from sarl.spec.presets import deep_merge, preset

    out = copy.deepcopy(dict(spec))
    if out.get("preset"):
        try:
            out = deep_merge(preset(str(out["preset"])), out)
        except (KeyError, ValueError):
            return copy.deepcopy(dict(spec))
    reward = out.get("reward")
    for _, endpoint in chat_endpoints(reward if isinstance(reward, list) else []):
        if endpoint.get("model") and not endpoint.get("url"):
            endpoint["url"] = url
    return out
