"""Which pod may open a connection to which, under a set of ``networking.k8s.io/v1``
NetworkPolicies: the ingress rules as the Kubernetes documentation states them.

Used by tests/tenancy/test_network.py on the chart's rendered policies and the operator's built
ones. A fake, by necessity: no CNI runs here. It implements the semantics written in
https://kubernetes.io/docs/concepts/services-networking/network-policies/ (Kubernetes v1.33
docs; the API reference of NetworkPolicySpec/NetworkPolicyPeer/NetworkPolicyPort for defaults):

* "By default, a pod is non-isolated for ingress; all inbound connections are allowed. A pod is
  isolated for ingress if there is any NetworkPolicy that both selects the pod and has Ingress
  in its policyTypes"; ``policyTypes`` unset means Ingress (plus Egress when egress rules exist).
* "The only allowed connections into the pod are those from ... allowed by the ingress list of
  some NetworkPolicy that applies to the pod": policies are additive, a connection passes when
  one rule of one selecting policy allows it.
* A rule allows a connection when one of its ``from`` peers matches the source (``from`` empty or
  absent: every source) and one of its ``ports`` matches the destination port (absent: every
  port; a named port is the destination container's port of that name; protocol defaults TCP).
* A peer with only ``podSelector`` selects pods in the policy's own namespace; only
  ``namespaceSelector``: every pod of the selected namespaces; both: pods matching the
  podSelector in the selected namespaces. An empty selector ``{}`` selects everything.
  ``ipBlock`` peers are refused here (pod IPs are not modelled).
* Label selectors (meta/v1 LabelSelector): ``matchLabels`` and ``matchExpressions`` with In,
  NotIn, Exists, DoesNotExist, ANDed. Every namespace carries ``kubernetes.io/metadata.name``.

Egress is not modelled (sarl ships ingress policies only): a test that adds egress rules must
extend this. The connection is also judged as if the kubelet's own probes did not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    """A pod as the policies see it: namespace, labels and named container ports."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    ports: Mapping[str, int] = field(default_factory=dict)


def _namespace_labels(namespace: str, extra: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": namespace, **extra.get(namespace, {})}


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches ``labels`` (``{}`` or None: everything)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op!r}")
    return True


def _policy_types(spec: Mapping[str, Any]) -> Sequence[str]:
    if "policyTypes" in spec:
        return list(spec["policyTypes"])
    return ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _peer_matches(
    peer: Mapping[str, Any],
    policy_namespace: str,
    source: Pod,
    ns_labels: Mapping[str, Mapping[str, str]],
) -> bool:
    if "ipBlock" in peer:
        raise ValueError("ipBlock peers are not modelled")
    pod_sel, ns_sel = peer.get("podSelector"), peer.get("namespaceSelector")
    if ns_sel is None:
        in_namespace = source.namespace == policy_namespace
    else:
        in_namespace = selects(ns_sel, _namespace_labels(source.namespace, ns_labels))
    return in_namespace and (pod_sel is None or selects(pod_sel, source.labels))


def _port_matches(rule_port: Mapping[str, Any], dest: Pod, port: int, protocol: str) -> bool:
    if rule_port.get("protocol", "TCP") != protocol:
        return False
    wanted = rule_port.get("port")
    if wanted is None:
        return True
    if isinstance(wanted, str):  # a named port of the destination's containers
        if wanted not in dest.ports:
            return False
        wanted = dest.ports[wanted]
    end = rule_port.get("endPort", wanted)
    return bool(wanted <= port <= end)


def policies_in(
    objects: Iterable[Mapping[str, Any]], default_namespace: str
) -> list[dict[str, Any]]:
    """The NetworkPolicies among ``objects``, each with its namespace filled in (a chart's
    objects without one go to the release namespace ``default_namespace``)."""
    out = []
    for obj in objects:
        if obj.get("kind") == "NetworkPolicy":
            meta = dict(obj["metadata"])
            meta.setdefault("namespace", default_namespace)
            out.append({**obj, "metadata": meta})
    return out


def allowed(
    policies: Sequence[Mapping[str, Any]],
    source: Pod,
    dest: Pod,
    port: int,
    *,
    protocol: str = "TCP",
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> bool:
    """Whether ``source`` may connect to ``dest``:``port`` under ``policies`` (ingress side)."""
    ns_labels = namespace_labels or {}
    applying = [
        p
        for p in policies
        if p["metadata"]["namespace"] == dest.namespace
        and selects(p["spec"].get("podSelector"), dest.labels)
        and "Ingress" in _policy_types(p["spec"])
    ]
    if not applying:
        return True  # not isolated for ingress
    for policy in applying:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from") or []
            ports = rule.get("ports") or []
            namespace = policy["metadata"]["namespace"]
            peer_ok = not peers or any(
                _peer_matches(peer, namespace, source, ns_labels) for peer in peers
            )
            port_ok = not ports or any(_port_matches(p, dest, port, protocol) for p in ports)
            if peer_ok and port_ok:
                return True
    return False
