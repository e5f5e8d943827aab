"""The few Kubernetes API calls the handlers make, behind a protocol so tests can swap them.

Used by ``handlers``: :class:`DynamicKubeApi` (the kubernetes client's dynamic client, any kind
including CRDs; discovery is cached by the client) in the operator, an in-memory fake in the
handler unit tests, and the real class against kmock's emulator in ``tests/operators``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class KubeApi(Protocol):
    """Get, create and merge-patch namespaced objects (implemented by :class:`DynamicKubeApi`)."""

    def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None: ...

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def patch(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...


class DynamicKubeApi:
    """:class:`KubeApi` over the kubernetes client's dynamic client (in-cluster config, else
    ``KUBECONFIG``). Every request is bounded by ``timeout_s``; failures raise the client's
    ``ApiException``, which kopf turns into a retry of the handler."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        from kubernetes import client, config, dynamic

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self._client = dynamic.DynamicClient(client.ApiClient())
        self._timeout_s = timeout_s

    def _resource(self, api_version: str, kind: str) -> Any:
        return self._client.resources.get(api_version=api_version, kind=kind)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            obj = self._resource(api_version, kind).get(
                name=name, namespace=namespace, _request_timeout=self._timeout_s
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(obj.to_dict())

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        res = self._resource(obj["apiVersion"], obj["kind"])
        out = res.create(
            body=dict(obj),
            namespace=obj["metadata"]["namespace"],
            _request_timeout=self._timeout_s,
        )
        return dict(out.to_dict())

    def patch(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        res = self._resource(obj["apiVersion"], obj["kind"])
        out = res.patch(
            body=dict(obj),
            name=meta["name"],
            namespace=meta["namespace"],
            content_type="application/merge-patch+json",
            _request_timeout=self._timeout_s,
        )
        return dict(out.to_dict())


def apply(api: KubeApi, obj: Mapping[str, Any]) -> str:
    """Create ``obj`` or merge-patch the existing one; returns "created" or "patched"."""
    meta = obj["metadata"]
    if api.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) is None:
        api.create(obj)
        return "created"
    api.patch(obj)
    return "patched"
