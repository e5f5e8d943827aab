"""Whether a tenant's spec stays inside its namespace's policy (``sarl.cluster.tenancy``).

Called by the admission webhook (``sarl_operator.admission``) and by the handlers before they
build anything (``experiment_handlers``, ``study_handlers``): :func:`violations` lists what a
spec in ``namespace`` reaches outside its tenant policy, each message naming the field, the value
and what is allowed. Each area of the policy is one check (:data:`CHECKS`), a pure function of
the spec, the tenant's policy and the platform. No tenants configured: nothing is checked; a
namespace that is not a tenant is refused whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sarl.cluster.tenancy import TenantPolicy
from sarl.spec.experiment import Experiment
from sarl_operator import tenant_credentials, tenant_scheduling, tenant_store, tenant_tracking
from sarl_operator.platform_settings import Platform

#: One area of the tenant policy: the violations of a spec, as messages naming the field.
Check = Callable[[Experiment, TenantPolicy, Platform], list[str]]

#: Every area checked, in the order their messages are reported.
CHECKS: Final[tuple[Check, ...]] = (
    tenant_credentials.check,
    tenant_scheduling.check,
    tenant_tracking.check,
    tenant_store.store_violations,
)


def violations(exp: Experiment, namespace: str, platform: Platform) -> list[str]:
    """What ``exp`` in ``namespace`` reaches outside the tenant policy of ``platform``; empty
    when it stays inside (or no tenants are configured)."""
    tenancy = platform.tenancy
    if not tenancy.enabled:
        return []
    policy = tenancy.policy(namespace)
    if policy is None:
        listed = ", ".join(tenancy.namespaces())
        return [
            f"namespace {namespace!r} is not a tenant of this platform (tenants: {listed}); "
            "ask the platform's administrators to add it to the chart's `tenants`"
        ]
    return [message for check in CHECKS for message in check(exp, policy, platform)]
