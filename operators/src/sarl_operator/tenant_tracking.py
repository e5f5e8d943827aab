"""Tenant policy, tracking: under tenancy a spec's MLflow is the platform's.

A check of :data:`sarl_operator.tenant_policy.CHECKS` (called by the admission webhook and the
handlers through :func:`sarl_operator.tenant_policy.violations`). The operator calls the
tracking URI of an Experiment (to create its run, then every status tick to read its progress)
from the platform namespace, where it reaches what tenants cannot (the store's admin port, the
API server, cloud metadata); a tenant-chosen ``spec.tracking.mlflow_uri`` would make it a port
scanner and let dozens of unreachable URIs hold its workers for every team (issue 36, item 5).
So ``spec.tracking.mlflow_uri`` must be empty or the platform's own
(:attr:`~sarl_operator.platform_settings.Platform.tracking_uri`, ``SARL_MLFLOW_TRACKING_URI``),
and :meth:`sarl_operator.reconcile.Settings.tracking_uri_of` uses the platform's under tenancy
whatever the spec says (for objects admitted before tenancy was switched on). Pure.
"""

from __future__ import annotations

from sarl.cluster.tenancy import TenantPolicy
from sarl.spec.experiment import Experiment
from sarl.spec.secrets import redact_text
from sarl_operator.platform_settings import Platform


def same_uri(a: str, b: str) -> bool:
    """Whether two tracking URIs are the same server (a trailing ``/`` does not count)."""
    return a.strip().rstrip("/") == b.strip().rstrip("/")


def check(exp: Experiment, policy: TenantPolicy, platform: Platform) -> list[str]:
    """``spec.tracking.mlflow_uri`` when it is set and not the platform's MLflow."""
    uri = exp.spec.tracking.mlflow_uri
    if not uri or (platform.tracking_uri and same_uri(uri, platform.tracking_uri)):
        return []
    ours = platform.tracking_uri or "none configured"
    return [
        redact_text(
            f"spec.tracking.mlflow_uri={uri!r}: namespace {policy.namespace} tracks to the "
            f"platform's MLflow only ({ours}); leave spec.tracking.mlflow_uri empty"
        )
    ]
