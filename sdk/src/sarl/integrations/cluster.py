"""What the operator and the cluster client share about running an Experiment on a cluster.

* :func:`check_cluster`: can the chosen trainer run this spec? Called by the operator's reconcile
  (a spec the trainer would refuse ends Failed at once, naming the field, instead of a PyTorchJob
  that crashes and restarts) and by ``sarl.Client().submit`` (the same refusal before the
  request). The checks are the trainers' own mappings —
  :func:`sarl.integrations.verl.config.verl_overrides` and
  :func:`sarl.integrations.trl_cluster.cluster_overrides` — called with the job's shape, so what
  is accepted here is what the job accepts.
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


def check_cluster(exp: Experiment) -> None:
    """Raise ValueError naming the field when ``spec.resources.backend`` cannot run ``exp``."""
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
