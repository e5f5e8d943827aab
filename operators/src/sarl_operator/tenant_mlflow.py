"""Whose MLflow identity the operator uses, and which MLflow experiment a tenant's run is in.

Called by :mod:`sarl_operator.experiment_handlers` and :mod:`sarl_operator.study_handlers`:

* :func:`scoped_name` — on a platform with tenants the MLflow experiment of a run in namespace
  ``ns`` is ``ns/<name>`` (:func:`sarl.cluster.tenancy.mlflow_experiment_name`), so two teams
  using the same name never share an experiment; :func:`scoped` writes it into the Experiment's
  ``spec.tracking.experiment_name`` before anything is built, so the run the operator creates,
  the ConfigMap the jobs read and the Study's report all name the same experiment.
* :func:`authenticated` — the MLflow client factory with credentials: for a tenant namespace
  the tenant's own MLflow user, read from its platform copy Secret
  (:func:`sarl.cluster.tenancy.platform_copy_name`, in the operator's namespace), so the tenant's
  user creates — and owns, MLflow's basic-auth app granting its creator MANAGE — the
  experiments and parent runs, which other tenants (``default_permission: NO_PERMISSIONS``)
  cannot read; elsewhere the operator's own credentials (chart ``mlflow.auth.existingSecret``).

The Secret is read at most once per :data:`CACHE_TTL_S` seconds per namespace (every reconcile
and status tick of every Experiment would read it otherwise); a rotated password takes effect
within that time. A Secret that is missing or lacks a key fails the MLflow call
(:class:`~sarl_operator.tracking.TrackingError`: ``TrackingReady=False``, retried) naming the
Secret and the command that writes it; its values are never logged.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from sarl.cluster.tenancy import TenantKeys, mlflow_experiment_name, platform_copy_name
from sarl.spec.experiment import Experiment
from sarl_operator.kube import KubeApi
from sarl_operator.platform_settings import Platform
from sarl_operator.reconcile import Settings
from sarl_operator.tracking import MlflowTracking, TrackingError

#: Seconds a tenant's MLflow credentials are reused before the Secret is read again.
CACHE_TTL_S: Final = 60.0

Credentials = tuple[str, str]
T = TypeVar("T")


def scoped_name(name: str, namespace: str, platform: Platform) -> str:
    """The MLflow experiment name of ``name`` in ``namespace``: ``<ns>/<name>`` on a platform
    with tenants (idempotent), ``name`` itself on a single-team install."""
    if not platform.tenancy.enabled:
        return name
    return mlflow_experiment_name(namespace, name)


def scoped(exp: Experiment, namespace: str, platform: Platform) -> Experiment:
    """``exp`` with ``spec.tracking.experiment_name`` set to its scoped name (default: the
    Experiment's name); unchanged on a single-team install."""
    if not platform.tenancy.enabled:
        return exp
    tracking = exp.spec.tracking
    name = scoped_name(tracking.experiment_name or exp.name, namespace, platform)
    if tracking.experiment_name == name:
        return exp
    spec = exp.spec.model_copy(
        update={"tracking": tracking.model_copy(update={"experiment_name": name})}
    )
    return exp.model_copy(update={"spec": spec})


def _decoded(data: Mapping[str, Any], key: str) -> str:
    try:
        return base64.b64decode(str(data.get(key) or ""), validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def read_tenant_credentials(api: KubeApi, namespace: str, platform_namespace: str) -> Credentials:
    """The MLflow user of tenant ``namespace`` from its platform copy Secret in
    ``platform_namespace``; TrackingError naming the Secret when it is missing or incomplete."""
    name = platform_copy_name(namespace)
    secret = api.get("v1", "Secret", platform_namespace, name)
    data = (secret or {}).get("data") or {}
    username = _decoded(data, TenantKeys.MLFLOW_USERNAME)
    password = _decoded(data, TenantKeys.MLFLOW_PASSWORD)
    if secret is None or not (username and password):
        what = (
            "not found"
            if secret is None
            else (f"has no {TenantKeys.MLFLOW_USERNAME}/{TenantKeys.MLFLOW_PASSWORD}")
        )
        raise TrackingError(
            f"tenant {namespace}: Secret {name} in namespace {platform_namespace} {what}: the "
            f"operator tracks the tenant's runs as its MLflow user; create it with `sarl tenant "
            f"credentials {namespace}` and `kubectl apply`, then `helm upgrade` (which creates "
            "the MLflow user)"
        )
    return username, password


@dataclass
class CredentialCache:
    """Tenant credentials by (platform namespace, tenant namespace), each kept ``ttl_s``."""

    ttl_s: float = CACHE_TTL_S
    clock: Callable[[], float] = time.monotonic
    _entries: dict[tuple[str, str], tuple[float, Credentials]] = field(default_factory=dict)

    def get(self, api: KubeApi, namespace: str, platform_namespace: str) -> Credentials:
        key = (platform_namespace, namespace)
        now = self.clock()
        cached = self._entries.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        credentials = read_tenant_credentials(api, namespace, platform_namespace)
        self._entries[key] = (now + self.ttl_s, credentials)
        return credentials

    def clear(self) -> None:
        self._entries.clear()


#: The operator process's cache (handlers build their settings per call; this outlives them).
CACHE: Final = CredentialCache()


def credentials(
    api: KubeApi,
    namespace: str,
    platform: Platform,
    *,
    own: Credentials | None,
    platform_namespace: str,
    cache: CredentialCache = CACHE,
) -> Credentials | None:
    """Whose MLflow identity a call for ``namespace`` uses: the tenant's own user for a tenant
    namespace, else ``own`` (the operator's; None: unauthenticated, MLflow without auth)."""
    if platform.tenancy.policy(namespace) is None:
        return own
    if not platform_namespace:
        raise TrackingError(
            f"tenant {namespace}: the operator's namespace is unknown (SARL_OPERATOR_NAMESPACE, "
            "set by the chart), so its MLflow credentials cannot be read"
        )
    return cache.get(api, namespace, platform_namespace)


def authenticated(
    factory: Callable[..., T],
    api: KubeApi,
    namespace: str,
    settings: Settings,
    cache: CredentialCache = CACHE,
) -> Callable[[str], T]:
    """``factory`` (an MLflow client class taking the tracking URI) with ``auth=`` the
    credentials of :func:`credentials`, read when a client is made (a reconcile that reuses the
    run in its status reads no Secret). No credentials: ``factory`` itself."""
    own, platform = settings.mlflow_auth, settings.platform
    if own is None and platform.tenancy.policy(namespace) is None:
        return factory

    def make(uri: str) -> T:
        auth = credentials(
            api,
            namespace,
            platform,
            own=own,
            platform_namespace=settings.operator_namespace,
            cache=cache,
        )
        client = factory(uri, auth=auth) if auth else factory(uri)
        if isinstance(client, MlflowTracking) and platform.tenancy.policy(namespace) is not None:
            # No other tenant may read an experiment this tenant's runs go to.
            others = other_tenants(api, namespace, platform, settings.operator_namespace, cache)
            return dataclasses.replace(client, other_tenants=others)
        return client

    return make


def other_tenants(
    api: KubeApi,
    namespace: str,
    platform: Platform,
    platform_namespace: str,
    cache: CredentialCache = CACHE,
) -> tuple[Credentials, ...]:
    """The MLflow credentials of every tenant but ``namespace`` (from their platform copy
    Secrets; a tenant whose Secret does not exist yet has no MLflow user and is left out)."""
    found = []
    for other in platform.tenancy.namespaces():
        if other == namespace:
            continue
        try:
            found.append(cache.get(api, other, platform_namespace))
        except TrackingError:
            continue
    return tuple(found)


def progress_tracker(uri: str, auth: Credentials | None = None) -> MlflowTracking:
    """The status timer's MLflow client: one retry (the next tick tries again)."""
    return MlflowTracking(uri, max_retries=1, auth=auth)


def progress_trackers(
    api: KubeApi, namespace: str, settings: Settings
) -> Callable[[str], MlflowTracking]:
    """:func:`progress_tracker` with ``namespace``'s credentials (:func:`authenticated`)."""
    return authenticated(progress_tracker, api, namespace, settings)
