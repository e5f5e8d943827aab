"""The NetworkPolicies (``networking.k8s.io/v1``) the operator applies per Experiment.

Called by ``experiment_handlers.reconcile`` (applied with the Experiment's other children, owned
by it, so the garbage collector deletes them with it) and by the golden-file tests. Pure: plain
dicts out.

Why: the verl trainer's Ray head listens on 6379 (GCS), 10001 (client server), 8265 (dashboard)
and its workers on ports Ray picks at random, and whoever reaches them can run code in the
trainer (Ray's security page, docs.ray.io/en/latest/ray-security). Ray's token authentication
(:mod:`sarl_jobs.cluster`) closes the door; these policies keep other pods from reaching it:

* ``<name>-trainer``: the Experiment's training pods (``sarl.dev/experiment=<name>``,
  component ``trainer``) accept ingress only from the same Experiment's training pods, on every
  port (Ray's worker ports are not fixed, and NCCL's neither); nothing else.
* ``<name>-served``, only when the Experiment serves models: its InferenceServices' pods (KServe
  v0.17.0 copies the InferenceService's labels onto them, ``pkg/controller/v1beta1/
  inferenceservice/components/predictor.go`` ``buildObjectMeta``) accept ingress only from the
  Experiment's training and evaluation pods; in KServe's Serverless mode also from Knative's
  namespaces, through which requests are proxied (:data:`KNATIVE_NAMESPACES`).

A selected pod is isolated for ingress: what no policy allows is dropped, by a CNI that enforces
NetworkPolicies (Calico, Cilium...; without one these are inert). Kubelet probes come from the
node and are not affected. Platform ``network_policies`` off (chart ``networkPolicy.enabled:
false``): none is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sarl.spec.experiment import Experiment
from sarl_operator.child_meta import EXPERIMENT_LABEL, meta
from sarl_operator.platform_settings import Platform

API_VERSION: Final = "networking.k8s.io/v1"
KIND: Final = "NetworkPolicy"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
#: Components of the Experiment's pods that call its served models.
CALLERS: Final = ("trainer", "evaluation")
#: Components of the Experiment's served models (``served_models``).
SERVED: Final = ("embedding", "judge")
#: Namespaces whose pods proxy requests to a Serverless InferenceService: Knative's activator
#: (``knative-serving``; KServe's "Secure InferenceService with ServiceMesh" page: "when
#: activator is on the request path, the rule checks the source namespace knative-serving") and
#: the cluster-local gateway of KServe's Serverless install (``knative-local-gateway`` in
#: ``istio-system``). Matched by the ``kubernetes.io/metadata.name`` label every namespace has.
KNATIVE_NAMESPACES: Final = ("knative-serving", "istio-system")
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"


def trainer_policy_name(exp: Experiment) -> str:
    return f"{exp.name}-trainer"


def served_policy_name(exp: Experiment) -> str:
    return f"{exp.name}-served"


def _pods(exp: Experiment, components: Sequence[str]) -> dict[str, Any]:
    """A label selector of the Experiment's pods of ``components``."""
    return {
        "matchLabels": {EXPERIMENT_LABEL: exp.name},
        "matchExpressions": [
            {"key": COMPONENT_LABEL, "operator": "In", "values": list(components)}
        ],
    }


def _policy(
    exp: Experiment, name: str, namespace: str, selected: dict[str, Any], peers: list[Any]
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta(exp, name, namespace, "network-policy"),
        "spec": {
            "podSelector": selected,
            "policyTypes": ["Ingress"],
            # One rule without ports: every port, from these peers only.
            "ingress": [{"from": peers}],
        },
    }


def trainer_policy(exp: Experiment, namespace: str) -> dict[str, Any]:
    """``<name>-trainer``: the training pods accept only each other (Ray, NCCL)."""
    # A podSelector peer without namespaceSelector: pods of the policy's own namespace only.
    peers = [{"podSelector": _pods(exp, ["trainer"])}]
    return _policy(exp, trainer_policy_name(exp), namespace, _pods(exp, ["trainer"]), peers)


def served_policy(exp: Experiment, namespace: str) -> dict[str, Any]:
    """``<name>-served``: the served models accept only the Experiment's trainer and evaluation
    pods, and Knative's proxies when the Experiment serves in Serverless mode."""
    peers: list[Any] = [{"podSelector": _pods(exp, CALLERS)}]
    if exp.spec.serving.deployment_mode == "Serverless":
        peers += [
            {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}
            for ns in KNATIVE_NAMESPACES
        ]
    return _policy(exp, served_policy_name(exp), namespace, _pods(exp, SERVED), peers)


def network_policies(
    exp: Experiment, namespace: str, platform: Platform, serves_models: bool
) -> list[dict[str, Any]]:
    """The Experiment's NetworkPolicies (none when the platform's are off); ``serves_models``:
    whether the operator serves InferenceServices for it."""
    if not platform.network_policies:
        return []
    out = [trainer_policy(exp, namespace)]
    if serves_models:
        out.append(served_policy(exp, namespace))
    return out
