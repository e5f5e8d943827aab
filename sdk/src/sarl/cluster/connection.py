"""Connect to a Kubernetes API server: kubeconfig or in-cluster config, default namespace, and
timed, bounded-retry calls.

Used by :class:`sarl.cluster.client.ClusterClient` (and through it ``sarl.Client()`` and the
``sarl submit|status|logs|delete|wait`` commands), whose requests go through
:class:`~sarl.cluster.resources.CustomObjects` and :class:`~sarl.cluster.pods.PodLogs`.
``kubernetes`` is imported here, lazily, so ``import sarl`` works without the ``cluster`` extra.

Which configuration is used:

1. ``kubeconfig``/``context`` given → that kubeconfig file (and context);
2. else, inside a pod (``KUBERNETES_SERVICE_HOST`` set) → the pod's service account;
3. else the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).

The namespace defaults to the context's ``namespace`` (the pod's namespace in-cluster), else
``default``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from sarl.cluster.errors import ClusterError, ClusterExtraMissing, ClusterUnreachable

T = TypeVar("T")

SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: HTTP statuses worth retrying for an idempotent read (throttled or server-side trouble).
RETRY_STATUSES: Final = frozenset({429, 500, 502, 503, 504})


def require_kubernetes() -> None:
    """Raise :class:`ClusterExtraMissing` with the install hint if ``kubernetes`` is absent."""
    try:
        import kubernetes  # noqa: F401
    except ImportError as e:
        raise ClusterExtraMissing(
            "the cluster client needs the kubernetes package: pip install 'sarl[cluster]'"
        ) from e


@dataclass(frozen=True)
class Connection:
    """A configured ``kubernetes.client.ApiClient`` plus what the client needs around it."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str
    host: str
    timeout: tuple[float, float]  # (connect, read) seconds, per request
    retries: int  # extra attempts of idempotent reads
    backoff: float  # first delay between attempts (doubles)

    def call(self, fn: Callable[..., T], *args: Any, read: bool = False, **kwargs: Any) -> T:
        """``fn(*args, **kwargs, _request_timeout=timeout)``; reads (``read=True``) are retried
        ``retries`` times on connection errors and 429/5xx, writes never (a create that timed
        out may have happened). Exceptions propagate for :func:`~sarl.cluster.errors.api_error`.
        """
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self.timeout)
        attempts = 1 + (self.retries if read else 0)
        delay = self.backoff
        for attempt in range(1, attempts + 1):
            try:
                return fn(*args, **kwargs)
            except ApiException as e:
                if attempt == attempts or e.status not in RETRY_STATUSES:
                    raise
            except HTTPError:
                if attempt == attempts:
                    raise
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover  # the loop returns or raises


def connect(
    *,
    kubeconfig: str | Path | None,
    context: str | None,
    namespace: str | None,
    timeout: tuple[float, float],
    retries: int,
    backoff: float,
) -> Connection:
    """Load the configuration (see the module docstring) into a fresh ``ApiClient``."""
    require_kubernetes()
    from kubernetes import client

    cfg = client.Configuration()
    in_cluster = (
        kubeconfig is None and context is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    )
    default_ns = _load_in_cluster(cfg) if in_cluster else _load_kubeconfig(cfg, kubeconfig, context)
    # Our own retry loop (Connection.call) decides what is retried; urllib3 must not retry
    # behind it (its default retries a refused connection three times, for writes too).
    cfg.retries = 0
    return Connection(
        api=client.ApiClient(cfg),
        namespace=namespace or default_ns or "default",
        host=str(cfg.host),
        timeout=timeout,
        retries=retries,
        backoff=backoff,
    )


def _load_in_cluster(cfg: Any) -> str:
    from kubernetes import config

    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as e:
        raise ClusterUnreachable(f"cannot use the pod's service account ({e})") from e
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _load_kubeconfig(cfg: Any, kubeconfig: str | Path | None, context: str | None) -> str:
    """Fill ``cfg`` from the kubeconfig; returns the context's namespace (or "")."""
    import yaml
    from kubernetes import config

    # KUBECONFIG may list several files (merged by the kubernetes client, like kubectl does).
    source = str(kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config")
    paths = [Path(p).expanduser() for p in source.split(os.pathsep) if p]
    if not any(p.is_file() for p in paths):
        raise ClusterUnreachable(
            f"no kubeconfig found ({source} does not exist and this is not a pod in a cluster; "
            "set KUBECONFIG or pass --kubeconfig)"
        )
    files = os.pathsep.join(str(p) for p in paths if p.is_file())
    try:
        config.load_kube_config(
            config_file=files, context=context, client_configuration=cfg, persist_config=False
        )
        contexts, active = config.list_kube_config_contexts(config_file=files)
    except (config.ConfigException, yaml.YAMLError, ValueError, TypeError, KeyError, OSError) as e:
        raise ClusterUnreachable(f"cannot use kubeconfig {source}: {_one_line(e)}") from e
    chosen = active
    if context:
        chosen = next((c for c in contexts or [] if c.get("name") == context), None)
    return str(((chosen or {}).get("context") or {}).get("namespace") or "")


def configured_cluster(env: Mapping[str, str]) -> str | None:
    """Which cluster configuration :func:`connect` would use with no arguments, in words
    (``"the pod's service account"``, ``"kubeconfig ~/.kube/config"``), or None when there is
    none: no ``KUBERNETES_SERVICE_HOST`` and no kubeconfig file. Reads no file's content and
    reaches no server (``sarl run`` decides with it whether to train here)."""
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "the pod's service account"
    source = env.get("KUBECONFIG") or str(Path(env.get("HOME") or "~", ".kube", "config"))
    files = [p for p in source.split(os.pathsep) if p and Path(p).expanduser().is_file()]
    return f"kubeconfig {os.pathsep.join(files)}" if files else None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


__all__ = [
    "ClusterError",
    "Connection",
    "configured_cluster",
    "connect",
    "require_kubernetes",
]
