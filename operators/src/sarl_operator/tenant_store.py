"""Tenant policy, object store: a spec's ``s3://`` URIs stay inside its namespace's prefixes.

One entry of ``tenant_policy.CHECKS`` (called by the admission webhook and the handlers before
anything is built). On the platform bucket a tenant's key reaches only its own prefixes
(``checkpoints/<ns>/``, ``data/<ns>/``, ``models/<ns>/``) and reads ``shared/``
(:func:`sarl.cluster.tenancy.store_prefixes`); a URI outside them would fail in the pod with an
AccessDenied, or, with a key that reaches further, touch another team's work, so it is refused
here with the allowed prefixes named. Checked: ``spec.storage.checkpoint_uri`` (written, resumed
from and pruned: read-write prefixes only), ``spec.data.dataset``, ``spec.evaluation.benchmarks``,
the policy ``spec.model.name`` and every model the operator serves for the rewards (read: shared/
too). URIs on other buckets are the tenant's own store, reached with its own
``spec.storage.credentials_secret``. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sarl.cluster.store_access import uri_violation
from sarl.cluster.tenancy import TenantPolicy
from sarl.integrations.cluster import chat_endpoints
from sarl.spec.experiment import Experiment
from sarl_operator.platform_settings import Platform


def _data_locations(exp: Experiment) -> Iterator[tuple[str, str]]:
    """(field, value) of the dataset and benchmarks: a URI, or a path under the namespace's
    data location."""
    if exp.spec.data.dataset:
        yield "spec.data.dataset", exp.spec.data.dataset
    for i, name in enumerate(exp.spec.evaluation.benchmarks):
        yield f"spec.evaluation.benchmarks[{i}]", name


def _models(exp: Experiment) -> Iterator[tuple[str, str]]:
    """(field, value) of the policy and of every model named for the rewards."""
    yield "spec.model.name", exp.spec.model.name
    reward = [term.model_dump(mode="json") for term in exp.spec.reward]
    for i, term in enumerate(reward):
        embedder = term.get("settings", {}).get("embedder")
        if isinstance(embedder, Mapping) and embedder.get("model"):
            yield f"spec.reward[{i}].settings.embedder.model", str(embedder["model"])
    for path, endpoint in chat_endpoints(reward):
        if endpoint.get("model"):
            yield f"{path}.model", str(endpoint["model"])


def _relative_escape(field: str, value: str) -> str | None:
    """A dataset or benchmark is resolved under the namespace's data location when it is no
    URI: a ``..`` segment would climb out of it into another team's data."""
    if "://" in value or ".." not in value.replace("\\", "/").split("/"):
        return None
    return (
        f"{field} {value!r}: '..' is not allowed; name a file under your namespace's data "
        "location (where `sarl data prepare` wrote it) or an s3:// URI inside your prefixes"
    )


def store_violations(exp: Experiment, policy: TenantPolicy, platform: Platform) -> list[str]:
    """The spec's object-store locations outside ``policy.namespace``'s prefixes of the
    platform bucket, one message per field naming the allowed prefixes."""
    namespace, bucket = policy.namespace, platform.s3_bucket
    found: list[str] = []
    checkpoint = exp.spec.storage.checkpoint_uri
    if checkpoint:
        reason = uri_violation(checkpoint, namespace, bucket, write=True)
        if reason:
            found.append(f"spec.storage.checkpoint_uri {reason}")
    for field, value in _data_locations(exp):
        escape = _relative_escape(field, value)
        if escape:
            found.append(escape)
    for field, value in (*_data_locations(exp), *_models(exp)):
        reason = uri_violation(value, namespace, bucket, write=False)
        if reason:
            found.append(f"{field} {reason}")
    return found
