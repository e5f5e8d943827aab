"""Tenants of a shared cluster: which namespaces are teams, what each may use, and where each
tenant's credentials are.

One source of truth for every part that isolates teams from each other:

* the chart's ``tenants`` values (charts/sarl-platform), rendered into the operator's
  ``SARL_TENANTS`` (JSON of :class:`Tenancy`), into per-namespace Roles, NetworkPolicies and the
  hook Jobs that create each tenant's store and MLflow users;
* the operator and its admission webhook (``sarl_operator.tenant_policy``), which refuse a spec
  that reaches outside its namespace's policy, and the builders, which wire the tenant's own
  credentials (:data:`TENANT_SECRET`) into its pods;
* ``sarl tenant`` (admin CLI), which writes the credential Secrets of a new tenant.

Each tenant namespace holds one Secret, :data:`TENANT_SECRET`, with the keys of
:class:`TenantKeys`: its own object-store key pair (limited to :func:`store_prefixes`), MLflow user,
checkpoint-signing key, Ray token and served-model API key. The platform namespace holds a copy,
:func:`platform_copy_name`, for the hook Jobs that register those users; the platform's root keys
never leave the platform namespace. No tenants configured (``tenants: []``): a single-team
install, nothing here is enforced. Pure: no Kubernetes, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

#: The operator's environment variable holding :class:`Tenancy` as JSON (chart-rendered).
TENANTS_ENV: Final = "SARL_TENANTS"
#: The Secret with a tenant's own credentials in its namespace (keys: :class:`TenantKeys`).
TENANT_SECRET: Final = "sarl-tenant"
#: Prefix of the MLflow experiment names of a tenant's runs: ``<namespace>/<name>``.
EXPERIMENT_SEPARATOR: Final = "/"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TenantKeys:
    """Keys of :data:`TENANT_SECRET`; each is also the environment variable its value is given
    to the tenant's pods as (the libraries read them under these names)."""

    STORE_ACCESS_KEY_ID: Final = "AWS_ACCESS_KEY_ID"
    STORE_SECRET_ACCESS_KEY: Final = "AWS_SECRET_ACCESS_KEY"
    MLFLOW_USERNAME: Final = "MLFLOW_TRACKING_USERNAME"
    MLFLOW_PASSWORD: Final = "MLFLOW_TRACKING_PASSWORD"
    CHECKPOINT_KEY: Final = "SARL_CHECKPOINT_KEY"
    RAY_TOKEN: Final = "RAY_AUTH_TOKEN"
    SERVING_API_KEY: Final = "SARL_SERVING_API_KEY"
    ALL: Final = (
        STORE_ACCESS_KEY_ID,
        STORE_SECRET_ACCESS_KEY,
        MLFLOW_USERNAME,
        MLFLOW_PASSWORD,
        CHECKPOINT_KEY,
        RAY_TOKEN,
        SERVING_API_KEY,
    )


#: Environment variables a spec may never name as a credential (``api_key_env`` and the like),
#: whatever the tenant's policy says: the platform's own credentials live in them.
RESERVED_ENV_PREFIXES: Final = ("AWS_", "MLFLOW_", "SARL_", "RAY_", "KUBERNETES_", "HF_")


def platform_copy_name(namespace: str) -> str:
    """Name of the copy of ``namespace``'s :data:`TENANT_SECRET` in the platform namespace (read
    by the hook Jobs that create the tenant's store and MLflow users)."""
    return f"{TENANT_SECRET}-{namespace}"


class Toleration(BaseModel):
    """A toleration a tenant's pods may carry (Kubernetes' core/v1 Toleration fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class TenantPolicy(BaseModel):
    """What one tenant namespace's specs may use beyond their own namespace's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    namespace: str
    #: Secret names a spec may reference (``spec.storage.credentials_secret``,
    #: ``spec.resources.hf_token``, serving keys), besides :data:`TENANT_SECRET`.
    secrets: tuple[str, ...] = ()
    #: Environment variable names a spec may name as a credential (``api_key_env``); never one
    #: starting with :data:`RESERVED_ENV_PREFIXES`.
    env_names: tuple[str, ...] = Field(default=(), alias="envNames")
    #: PriorityClass names a spec may use (``scheduling.priority_class``); empty: none.
    priority_classes: tuple[str, ...] = Field(default=(), alias="priorityClasses")
    #: Tolerations a spec may add; a spec's toleration must equal one of these.
    tolerations: tuple[Toleration, ...] = ()
    #: Node-selector label keys a spec may use, each with its allowed values.
    node_selectors: Mapping[str, tuple[str, ...]] = Field(
        default_factory=dict, alias="nodeSelectors"
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(f"tenants[].namespace {value!r}: must be a namespace name (DNS label)")
        return value

    @field_validator("env_names")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"tenants[].envNames {name!r}: not an environment variable name")
            if name.upper().startswith(RESERVED_ENV_PREFIXES):
                reserved = ", ".join(RESERVED_ENV_PREFIXES)
                raise ValueError(
                    f"tenants[].envNames {name!r}: names starting with {reserved} hold the "
                    "platform's credentials and cannot be given to a spec"
                )
        return value


class Tenancy(BaseModel):
    """The platform's tenants (chart ``tenants``); empty: one team, nothing enforced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenants: tuple[TenantPolicy, ...] = ()

    @field_validator("tenants")
    @classmethod
    def _unique(cls, value: tuple[TenantPolicy, ...]) -> tuple[TenantPolicy, ...]:
        seen: set[str] = set()
        for tenant in value:
            if tenant.namespace in seen:
                raise ValueError(f"tenants: namespace {tenant.namespace!r} listed twice")
            seen.add(tenant.namespace)
        return value

    @property
    def enabled(self) -> bool:
        """Whether tenancy is enforced (at least one tenant namespace listed)."""
        return bool(self.tenants)

    def policy(self, namespace: str) -> TenantPolicy | None:
        """The policy of ``namespace``; None when it is not a tenant."""
        return next((t for t in self.tenants if t.namespace == namespace), None)

    def namespaces(self) -> tuple[str, ...]:
        return tuple(t.namespace for t in self.tenants)


#: No tenants: a single-team install.
NO_TENANCY: Final = Tenancy()


def tenancy_from_env(env: Mapping[str, str]) -> Tenancy:
    """:class:`Tenancy` from ``SARL_TENANTS`` (JSON ``{"tenants": [...]}``); unset or empty:
    :data:`NO_TENANCY`. ValueError naming the variable when it is not a valid policy."""
    raw = env.get(TENANTS_ENV, "").strip()
    if not raw:
        return NO_TENANCY
    try:
        return Tenancy.model_validate(json.loads(raw))
    except (json.JSONDecodeError, ValidationError) as error:
        first = (
            str(error).splitlines()[0]
            if isinstance(error, json.JSONDecodeError)
            else ("; ".join(e["msg"] for e in error.errors()))
        )
        raise ValueError(f"{TENANTS_ENV}: not a valid tenants policy: {first}") from None


def store_prefixes(namespace: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Key prefixes of the platform bucket a tenant's credentials reach: (read-write, read-only).

    Read-write: its checkpoints, datasets and models (``checkpoints/<ns>/``, ``data/<ns>/``,
    ``models/<ns>/``); read-only: ``shared/``, where the platform's administrators put models and
    benchmarks every team may use. Nothing else — MLflow's artifacts (``mlflow/``) go through the
    tracking server, which checks the tenant's MLflow permissions.
    """
    read_write = (f"checkpoints/{namespace}/", f"data/{namespace}/", f"models/{namespace}/")
    return read_write, ("shared/",)


def mlflow_experiment_name(namespace: str, name: str) -> str:
    """The MLflow experiment of a tenant's run named ``name``: ``<namespace>/<name>``, so that
    two teams using the same name never share an experiment."""
    prefix = f"{namespace}{EXPERIMENT_SEPARATOR}"
    return name if name.startswith(prefix) else f"{prefix}{name}"
