"""Kubernetes RBAC as the API server's authorizer applies it, for the tests that pin sarl's roles
to the API calls actually made (tests/charts/test_rbac.py: the ``sarl`` CLI against the
aggregated user roles; tests/operators/test_rbac.py: the operator against its own roles).

The calls are read from the in-memory API server (:mod:`tests.support.kube_server`; kmock keeps
every request it served) and turned into :class:`Call`\\ s the way the API server's request-info
resolver does: ``GET`` with a name is ``get``, without one ``list``, with ``?watch`` ``watch``;
``POST`` ``create``, ``PUT`` ``update``, ``PATCH`` ``patch``, ``DELETE`` ``delete`` (without a
name ``deletecollection``). Discovery and ``/version`` are left out: every authenticated user may
read them (ClusterRole ``system:discovery``). Some permissions are checked on a request's body
rather than its URL; :func:`implied_calls` adds the one sarl relies on (``blockOwnerDeletion``).

A :class:`Grant` is one rule of a Role or ClusterRole as bound to a subject: in one namespace
(a RoleBinding) or cluster-wide (a ClusterRoleBinding). The built-in user roles are modelled
from Kubernetes' bootstrap policy for the resources sarl's clients touch
(:data:`BUILTIN_RULES`), plus the rules of rendered ClusterRoles carrying aggregation labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

#: Label selecting a ClusterRole's rules into a built-in role (its ``aggregationRule``).
AGGREGATE: Final = {
    "view": "rbac.authorization.k8s.io/aggregate-to-view",
    "edit": "rbac.authorization.k8s.io/aggregate-to-edit",
    "admin": "rbac.authorization.k8s.io/aggregate-to-admin",
}
#: The built-in ``view`` is itself labelled aggregate-to-edit and ``edit`` aggregate-to-admin.
INCLUDES: Final = {"view": (), "edit": ("view",), "admin": ("edit",)}
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
#: Part of kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go
#: (system:aggregate-to-view / -edit): only the resources sarl's clients or children touch. A
#: call outside them is denied here even if the real role allows it; check the real role then.
BUILTIN_RULES: Final[Mapping[str, Sequence[Mapping[str, Any]]]] = {
    "view": [
        {
            "apiGroups": [""],
            "resources": ["pods", "pods/log", "pods/status", "configmaps", "events", "namespaces"],
            "verbs": _READ,
        },
        {"apiGroups": ["batch"], "resources": ["jobs", "jobs/status"], "verbs": _READ},
    ],
    "edit": [
        {"apiGroups": [""], "resources": ["pods", "configmaps", "events"], "verbs": _WRITE},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": _WRITE},
    ],
    "admin": [],
}


@dataclass(frozen=True, order=True)
class Call:
    """One authorization check: ``resource`` includes the subresource (``pods/log``);
    ``namespace`` None is a cluster-scoped request (or a list/watch across namespaces)."""

    group: str
    resource: str
    verb: str
    namespace: str | None = None
    name: str | None = None

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


def call_of(method: str, path: str, params: Mapping[str, str]) -> Call | None:
    """The :class:`Call` of one HTTP request; None for discovery and other non-resource URLs."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":  # /namespaces/<ns>/<resource>...
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None  # /api/v1, /apis/<group>/<version>: discovery
    resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
    if len(rest) > 2:
        resource = f"{resource}/{'/'.join(rest[2:])}"
    method = method.upper()
    if method == "GET":
        verb = "watch" if params.get("watch") in ("true", "1") else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return Call(group, resource, verb, namespace, name)


@dataclass(frozen=True)
class Recorded:
    """A request the in-memory API server served: its call, body and User-Agent."""

    call: Call
    body: Any
    user_agent: str


def recorded(server: Any, since: int = 0) -> list[Recorded]:
    """The resource requests ``server`` (a :class:`~tests.support.kube_server.KubeServer`) has
    served, from the ``since``-th request on (see :func:`request_count`)."""

    def read(emulator: Any) -> list[tuple[str, str, dict[str, str], Any, str]]:
        return [
            (
                str(r.method.value),
                str(r.url.path),
                dict(r.params),
                r.data,
                str(r.headers.get("User-Agent", "")),
            )
            for r in list(emulator)[since:]
        ]

    out: list[Recorded] = []
    for method, path, params, body, agent in server.call(read):
        call = call_of(method, path, params)
        if call is not None:
            out.append(Recorded(call, body, agent))
    return out


def request_count(server: Any) -> int:
    """How many requests ``server`` has served so far (a mark for :func:`recorded`)."""
    return int(server.call(lambda emulator: len(list(emulator))))


def implied_calls(rec: Recorded, plurals: Mapping[tuple[str, str], str]) -> list[Call]:
    """Checks the API server makes on ``rec``'s body: an ownerReference with
    ``blockOwnerDeletion: true`` needs ``update`` on the owner's ``finalizers`` subresource
    (admission plugin OwnerReferencesPermissionEnforcement, on by default on OpenShift and in
    many hardened clusters). ``plurals`` maps (group, kind) to the resource name."""
    if rec.call.verb not in ("create", "update", "patch") or not isinstance(rec.body, dict):
        return []
    meta = rec.body.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    out = []
    for ref in refs if isinstance(refs, list) else []:
        if not ref.get("blockOwnerDeletion"):
            continue
        group = str(ref.get("apiVersion", "")).rpartition("/")[0]
        plural = plurals[(group, str(ref.get("kind")))]
        out.append(Call(group, f"{plural}/finalizers", "update", rec.call.namespace, ref["name"]))
    return out


@dataclass(frozen=True)
class Grant:
    """One rule as bound: ``namespace`` None is cluster-wide (a ClusterRoleBinding)."""

    rule: Mapping[str, Any]
    namespace: str | None
    role: str

    def allows(self, call: Call) -> bool:
        if self.namespace is not None and call.namespace != self.namespace:
            return False
        return rule_allows(self.rule, call)


def _has(values: Iterable[str], value: str) -> bool:
    values = list(values)
    return "*" in values or value in values


def rule_allows(rule: Mapping[str, Any], call: Call) -> bool:
    """Whether one PolicyRule allows ``call`` (``*`` wildcards; ``resourceNames`` restrict to
    named objects, so they never allow list, watch or create, which carry no name)."""
    names = rule.get("resourceNames") or []
    return (
        _has(rule.get("apiGroups") or [], call.group)
        and _has(rule.get("resources") or [], call.resource)
        and _has(rule.get("verbs") or [], call.verb)
        and (not names or (call.name is not None and call.name in names))
    )


def allowed(grants: Iterable[Grant], call: Call) -> bool:
    return any(g.allows(call) for g in grants)


def subject_grants(
    objects: Sequence[Mapping[str, Any]], kind: str, name: str, namespace: str | None = None
) -> list[Grant]:
    """Every rule the rendered ``objects`` bind to one subject (e.g. the operator's
    ServiceAccount); a binding to a role that was not rendered is an error."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    grants: list[Grant] = []
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == kind and s["name"] == name and s.get("namespace") == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace")  # None for a ClusterRoleBinding
        role_ns = scope if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], role_ns, ref["name"])]
        grants += [Grant(rule, scope, ref["name"]) for rule in role.get("rules") or []]
    return grants


def default_role_rules(role: str, objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rules of the built-in ``view``, ``edit`` or ``admin`` ClusterRole on a cluster where
    ``objects`` are installed: its own (:data:`BUILTIN_RULES`), the aggregated ClusterRoles' and
    those of the roles it includes."""
    rules = list(BUILTIN_RULES[role])
    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] == "ClusterRole" and labels.get(AGGREGATE[role]) == "true":
            rules += obj.get("rules") or []
    for included in INCLUDES[role]:
        rules += default_role_rules(included, objects)
    return rules


def unused(grants: Iterable[Grant], calls: Iterable[Call]) -> list[str]:
    """Each (rule, resource, verb[, name]) of ``grants`` that none of ``calls`` needs, as text
    (a rule granting more than is used)."""
    calls = list(calls)
    out = []
    for grant in grants:
        rule = grant.rule
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    one = {**rule, "apiGroups": [group], "resources": [resource], "verbs": [verb]}
                    atom = Grant(one, grant.namespace, grant.role)
                    if not any(atom.allows(c) for c in calls):
                        names = rule.get("resourceNames")
                        named = f" {names}" if names else ""
                        out.append(f"{grant.role}: {verb} {group or 'core'}/{resource}{named}")
    return sorted(set(out))


def denied(grants: Iterable[Grant], calls: Iterable[Call]) -> list[str]:
    """The calls none of ``grants`` allows, as text."""
    grants = list(grants)
    return sorted({str(c) for c in calls if not allowed(grants, c)})


def kept(records: Iterable[Recorded], agent: Callable[[str], bool]) -> list[Recorded]:
    """The records whose User-Agent passes ``agent``."""
    return [r for r in records if agent(r.user_agent)]
