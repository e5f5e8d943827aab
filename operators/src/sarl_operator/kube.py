"""The few Kubernetes API calls the handlers make, behind a protocol so tests can swap them.

Used by the handlers (``sarl_operator.handlers`` builds the client): :class:`DynamicKubeApi` (the
kubernetes client's dynamic client, any kind including CRDs; discovery is cached by the client) in
the operator, an in-memory fake in the handler unit tests, and the real class against kmock's
emulator in ``tests/operators``.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Mapping
from typing import Any, Protocol


class MissingApiError(Exception):
    """The cluster does not serve ``api_version``/``kind`` (its CRD is not installed)."""

    def __init__(self, api_version: str, kind: str) -> None:
        super().__init__(f"{kind} ({api_version}) is not served by this cluster")
        self.api_version = api_version
        self.kind = kind


class ForeignOwnerError(Exception):
    """An object with a child's name exists but is not controlled by this owner: a previous
    owner's child still being garbage-collected, or an object somebody else created. It is
    never adopted (its status would be reported as ours)."""

    def __init__(self, obj: Mapping[str, Any], owner_uid: str) -> None:
        meta = obj.get("metadata") or {}
        ref = controller_ref(obj)
        holder = f"controlled by {ref.get('kind')} uid {ref.get('uid')}" if ref else "not ours"
        deleting = " and being deleted" if meta.get("deletionTimestamp") else ""
        super().__init__(
            f"{obj.get('kind')} {meta.get('name')!r} already exists, {holder}{deleting}; "
            "waiting for it to be deleted before creating this one"
        )
        self.owner_uid = owner_uid


class VersionConflictError(Exception):
    """The object was written since it was read: a write guarded by the ``resourceVersion`` it
    was read at (:meth:`KubeApi.patch_status`) was refused (HTTP 409 from the API server). Read
    it again and recompute."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        super().__init__(
            f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')} changed since "
            f"resourceVersion {meta.get('resourceVersion')!r}"
        )


def controller_ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The controller ownerReference of ``obj`` (empty when none)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return {}


def controlled_by(obj: Mapping[str, Any] | None, owner_uid: str) -> bool:
    """Whether ``obj`` exists and its controller is the owner with ``owner_uid``."""
    return obj is not None and controller_ref(obj).get("uid") == owner_uid


class KubeApi(Protocol):
    """Get, create, merge-patch, delete and list namespaced objects, and write an object's status
    unless it changed since it was read (implemented by :class:`DynamicKubeApi`)."""

    def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None: ...

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def patch(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def patch_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource of ``obj`` (as read: apiVersion, kind, name,
        namespace and ``metadata.resourceVersion``) with ``status``; VersionConflictError when
        the object was written since that version."""
        ...

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool: ...

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str = ""
    ) -> list[dict[str, Any]]: ...


class DynamicKubeApi:
    """:class:`KubeApi` over the kubernetes client's dynamic client (in-cluster config, else
    ``KUBECONFIG``). Every request is bounded by ``timeout_s``; failures raise the client's
    ``ApiException``, which kopf turns into a retry of the handler; a kind the cluster does not
    serve raises :class:`MissingApiError`."""

    def __init__(self, timeout_s: float = 30.0, *, kubeconfig: str | None = None) -> None:
        from kubernetes import client, config, dynamic

        if kubeconfig is not None:  # an explicit file (tests, tools) wins over the pod's account
            api_client = config.new_client_from_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        # The client's default discovery cache is a file shared by every process talking to the
        # same host (``$TMPDIR/osrcp-<md5(host)>.json``): a stale one says a kind is served after
        # its CRD went away (or another server took the address). Each instance discovers anew.
        self._cache_dir = tempfile.TemporaryDirectory(prefix="sarl-kube-discovery-")
        cache_file = os.path.join(self._cache_dir.name, "discovery.json")
        self._client = dynamic.DynamicClient(api_client, cache_file=cache_file)
        self._timeout_s = timeout_s
        # kopf runs sync handlers and timers in threads, and the client's discovery cache is a
        # plain dict that invalidate_cache() rebuilds: a lookup racing an invalidation (a kind
        # the cluster does not serve, e.g. TrainJob or Workload, invalidates on every call)
        # fails with KeyError 'resources' or 'apis' and leaves the cache broken for good.
        self._discovery = threading.Lock()

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        resources = self._client.resources
        with self._discovery:
            try:
                return resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                # The discovery cache may predate a CRD installed since: look again once.
                resources.invalidate_cache()
            try:
                return resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                raise MissingApiError(api_version, kind) from None

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

    def patch_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`KubeApi.patch_status`: ``metadata.resourceVersion`` in a merge patch is a
        precondition the API server checks (409 Conflict when the object has another version;
        controller-runtime's ``MergeFromWithOptimisticLock`` writes the same patch)."""
        from kubernetes.client.exceptions import ApiException

        meta = obj["metadata"]
        version = meta.get("resourceVersion")
        if not version:
            raise ValueError(
                f"{obj['kind']} {meta['name']}: no metadata.resourceVersion to guard the status "
                "write with; pass the object as read from the API"
            )
        res = self._resource(obj["apiVersion"], obj["kind"])
        try:
            out = res.status.patch(
                body={"metadata": {"resourceVersion": version}, "status": dict(status)},
                name=meta["name"],
                namespace=meta["namespace"],
                content_type="application/merge-patch+json",
                _request_timeout=self._timeout_s,
            )
        except ApiException as e:
            if e.status == 409:
                raise VersionConflictError(obj) from e
            raise
        return dict(out.to_dict())

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """The objects of ``kind`` in ``namespace`` matching ``label_selector`` (empty: all)."""
        res = self._resource(api_version, kind)
        kwargs: dict[str, Any] = {"namespace": namespace, "_request_timeout": self._timeout_s}
        if label_selector:
            kwargs["label_selector"] = label_selector
        items = res.get(**kwargs).to_dict().get("items") or []
        return [dict(item) for item in items]

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete the object (background propagation); False when it was already gone."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._resource(api_version, kind).delete(
                name=name,
                namespace=namespace,
                body={"propagationPolicy": "Background"},
                _request_timeout=self._timeout_s,
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


def apply(api: KubeApi, obj: Mapping[str, Any]) -> str:
    """Create ``obj`` or merge-patch the existing one; returns "created" or "patched".

    When ``obj`` names a controller owner, an existing object must already be controlled by
    that owner (same uid), else :class:`ForeignOwnerError`: a merge patch would replace its
    ``ownerReferences`` and adopt, say, the finished PyTorchJob of a deleted Experiment of the
    same name that the garbage collector has not removed yet."""
    meta = obj["metadata"]
    current = api.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    if current is None:
        api.create(obj)
        return "created"
    owner = controller_ref(obj).get("uid")
    if owner and not controlled_by(current, owner):
        raise ForeignOwnerError(current, owner)
    api.patch(obj)
    return "patched"
