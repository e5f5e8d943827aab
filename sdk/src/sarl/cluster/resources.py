"""Requests on sarl's custom resources (``experiments`` and ``studies`` of ``sarl.dev/v1alpha1``):
CRD discovery, get, create, merge-patch, list and delete, with ``kubernetes``' exceptions turned
into :class:`~sarl.cluster.errors.ClusterError` subclasses in one place (:meth:`translate`).

Called by :class:`sarl.cluster.client.ClusterClient`, which adds the typed views, namespaces
and waits; :class:`sarl.cluster.pods.PodLogs` reads pods through the same :meth:`translate`.
Each request goes through :meth:`sarl.cluster.connection.Connection.call` (timeouts; reads
retried, writes never). ``kubernetes`` is imported only when a request is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from sarl.cluster.connection import Connection
from sarl.cluster.documents import merge_patch
from sarl.cluster.errors import (
    INSTALL_CHART,
    INSTALL_STUDY_CRD,
    ClusterError,
    CrdNotInstalled,
    ExperimentNotFound,
    StudyNotFound,
    Target,
    api_error,
)
from sarl.cluster.waiting import wait_until_gone

GROUP: Final = "sarl.dev"
VERSION: Final = "v1alpha1"
PLURAL: Final = "experiments"
STUDY_PLURAL: Final = "studies"


class CustomObjects:
    """The custom-object requests of one client; remembers which CRDs discovery has shown."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._crd_seen: set[str] = set()

    def get(self, name: str, ns: str, plural: str = PLURAL) -> dict[str, Any]:
        self.require_crd(plural)
        with self.translate(Target("get", ns, name, plural)):
            obj = self._conn.call(
                self._custom().get_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                plural,
                name,
                read=True,
            )
        return dict(obj)

    def create(self, body: dict[str, Any], plural: str) -> dict[str, Any]:
        meta = body["metadata"]
        self.require_crd(plural)
        with self.translate(Target("create", meta["namespace"], meta["name"], plural)):
            obj = self._conn.call(
                self._custom().create_namespaced_custom_object,
                GROUP,
                VERSION,
                meta["namespace"],
                plural,
                body,
            )
        return dict(obj)

    def replace(self, body: dict[str, Any], plural: str) -> dict[str, Any]:
        """Merge-patch the stored object's spec (and labels) to ``body``'s, carrying the stored
        ``resourceVersion`` (a concurrent change fails with ``Rejected``)."""
        name, ns = body["metadata"]["name"], body["metadata"]["namespace"]
        current = self.get(name, ns, plural)
        meta = current.get("metadata") or {}
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "spec": merge_patch(current.get("spec") or {}, body["spec"]),
        }
        if "labels" in body["metadata"]:
            patch["metadata"]["labels"] = body["metadata"]["labels"]
        with self.translate(Target("replace", ns, name, plural)):
            obj = self._conn.call(
                self._custom().patch_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                plural,
                name,
                patch,
            )
        return dict(obj)

    def items(
        self, ns: str | None, plural: str, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects in ``ns`` (every namespace when None), as the API server lists them."""
        self.require_crd(plural)
        api = self._custom()
        extra = {"label_selector": label_selector} if label_selector else {}
        with self.translate(Target("list", ns, None, plural)):
            if ns is None:
                out = self._conn.call(
                    api.list_cluster_custom_object, GROUP, VERSION, plural, read=True, **extra
                )
            else:
                out = self._conn.call(
                    api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    ns,
                    plural,
                    read=True,
                    **extra,
                )
        return [dict(item) for item in out.get("items") or []]

    def delete(
        self, name: str, ns: str, plural: str, wait: bool, timeout: float, poll_interval: float
    ) -> None:
        """Delete (background, or foreground and poll until gone with ``wait``)."""
        self.require_crd(plural)
        target = Target("delete", ns, name, plural)
        policy = "Foreground" if wait else "Background"
        with self.translate(target):
            self._conn.call(
                self._custom().delete_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                plural,
                name,
                propagation_policy=policy,
            )
        if wait:
            wait_until_gone(
                lambda: self.get(name, ns, plural),
                target,
                timeout=timeout,
                poll_interval=poll_interval,
            )

    def require_crd(self, plural: str = PLURAL) -> None:
        """Check discovery once per client and resource: ``sarl.dev/v1alpha1`` must serve
        ``plural`` (``experiments``, ``studies``).

        Checked before the first request (as ``kubectl`` does), so a missing CRD is reported
        as such rather than as a bare 404 on whatever was asked."""
        if plural in self._crd_seen:
            return
        from kubernetes.client.exceptions import ApiException

        install = INSTALL_STUDY_CRD if plural == STUDY_PLURAL else INSTALL_CHART
        try:
            with self.translate(Target("discover", None, f"{GROUP}/{VERSION}", "APIs")):
                found = self._conn.call(self._custom().get_api_resources, GROUP, VERSION, read=True)
        except ClusterError as e:
            cause = e.__cause__
            if isinstance(cause, ApiException) and cause.status == 404:
                raise CrdNotInstalled(install) from e
            raise
        names = {r.name for r in (found.resources or [])}
        if plural not in names:
            raise CrdNotInstalled(install)
        self._crd_seen.add(plural)

    @contextmanager
    def translate(self, target: Target) -> Iterator[None]:
        """Turn ``kubernetes``/urllib3 exceptions raised inside into ``ClusterError``s."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            yield
        except (ApiException, HTTPError) as e:
            err = api_error(e, target, self._conn.host)
            if isinstance(err, ExperimentNotFound | StudyNotFound):
                self._crd_seen.discard(target.resource)  # a 404 may mean the CRD went away
                self.require_crd(target.resource)
            raise err from e

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._conn.api)
