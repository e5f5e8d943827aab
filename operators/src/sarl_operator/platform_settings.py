"""The platform's settings: where its services are, read from the operator's SARL_* environment.

:class:`Platform` is built once per operator process by ``reconcile.Settings.from_env`` and passed
to every builder (``builders``, ``job_pods``, ``served_models``, ``evaluation``, ``trainjob``,
``study_builders``) and to ``scheduling`` for the chart's Kueue and gang-scheduler choices; the
builders default to :data:`DEFAULT_PLATFORM` (nothing configured). Nothing here talks to a
cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sarl.cluster.tenancy import NO_TENANCY, Tenancy, tenancy_from_env
from sarl.plan import store_capacity_from_env
from sarl_operator import model_sources

#: The values of the chart's ``gangScheduler`` (``SARL_GANG_SCHEDULER``).
GANG_SCHEDULERS: Final = ("none", "scheduler-plugins", "volcano")


@dataclass(frozen=True)
class Platform:
    """Where the platform's services are: the operator's SARL_* environment (chart-wired)."""

    s3_endpoint_url: str = ""
    s3_bucket: str = ""
    s3_credentials_secret: str = ""
    s3_access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    s3_secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"
    cluster_domain: str = "cluster.local"
    #: Where ``sarl data prepare`` wrote ``benchmarks/<name>.parquet`` (for the evaluation Job).
    data_uri: str = ""
    #: Kueue LocalQueue of jobs whose spec names none (``kueue.defaultQueue``); empty: none.
    default_queue: str = ""
    #: Gang scheduler of multi-node PyTorchJobs (``gangScheduler``): one of
    #: :data:`GANG_SCHEDULERS`.
    gang_scheduler: str = "none"
    #: Room for checkpoints in the platform's store, bytes (``SARL_STORE_CAPACITY``: the bundled
    #: store's volume or ``objectStore.external.capacity``); None: unknown, not checked.
    store_capacity: int | None = None
    #: Hugging Face Hub mirror (``SARL_HF_ENDPOINT``) for pods whose spec sets none; empty: none.
    hf_endpoint: str = ""
    #: Tenant namespaces and their policies (``SARL_TENANTS``, chart ``tenants``); none: a
    #: single-team install.
    tenancy: Tenancy = NO_TENANCY
    #: Whether the operator applies each Experiment's NetworkPolicies
    #: (``sarl_operator.network_policies``; ``SARL_NETWORK_POLICIES``, chart
    #: ``networkPolicy.enabled``).
    network_policies: bool = True
    #: The platform's MLflow (``SARL_MLFLOW_TRACKING_URI``): under tenancy the only one a spec
    #: may name (``sarl_operator.tenant_tracking``); empty: none.
    tracking_uri: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Platform:
        """Read the variables set by charts/sarl-platform/templates/operator-deployment.yaml."""
        return cls(
            s3_endpoint_url=env.get("SARL_S3_ENDPOINT_URL", ""),
            s3_bucket=env.get("SARL_S3_BUCKET", ""),
            s3_credentials_secret=env.get("SARL_S3_CREDENTIALS_SECRET", ""),
            s3_access_key_id_key=env.get("SARL_S3_ACCESS_KEY_ID_KEY") or cls.s3_access_key_id_key,
            s3_secret_access_key_key=env.get("SARL_S3_SECRET_ACCESS_KEY_KEY")
            or cls.s3_secret_access_key_key,
            data_uri=env.get("SARL_DATA_URI")
            or (f"s3://{env['SARL_S3_BUCKET']}/data" if env.get("SARL_S3_BUCKET") else ""),
            default_queue=env.get("SARL_DEFAULT_QUEUE", ""),
            gang_scheduler=_gang_scheduler(env.get("SARL_GANG_SCHEDULER") or "none"),
            hf_endpoint=model_sources.platform_hf_endpoint(env.get("SARL_HF_ENDPOINT", "")),
            store_capacity=store_capacity_from_env(env),
            tenancy=tenancy_from_env(env),
            network_policies=env.get("SARL_NETWORK_POLICIES", "true").lower() != "false",
            tracking_uri=env.get("SARL_MLFLOW_TRACKING_URI", ""),
        )


def _gang_scheduler(value: str) -> str:
    """``SARL_GANG_SCHEDULER``, checked (the chart's schema allows these values only)."""
    if value not in GANG_SCHEDULERS:
        allowed = ", ".join(GANG_SCHEDULERS)
        raise ValueError(f"SARL_GANG_SCHEDULER={value!r}: must be one of {allowed}")
    return value


#: The platform with nothing configured (no object store): the builders' default.
DEFAULT_PLATFORM: Final = Platform()
