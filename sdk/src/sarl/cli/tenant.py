"""``sarl tenant``: a platform administrator's commands for the tenants of a shared cluster.

* ``sarl tenant credentials NS`` writes the two Secret manifests of a new tenant namespace (YAML,
  for ``kubectl apply -f -``): :data:`~sarl.cluster.tenancy.TENANT_SECRET` in ``NS`` and its copy
  :func:`~sarl.cluster.tenancy.platform_copy_name` in the platform namespace, with every key of
  :class:`~sarl.cluster.tenancy.TenantKeys` — fresh random values, the store key id
  ``sarl-<NS>`` (the bundled store's hook Job creates that user from the copy) and the MLflow
  user ``NS``. For external S3 the administrator creates the IAM user first and passes its key
  id with ``--store-access-key-id`` and its secret in ``SARL_TENANT_STORE_SECRET_KEY`` (never as
  an argument: arguments show in ``ps`` and shell history).
* ``sarl tenant store-policy NS --bucket B`` prints the IAM policy of that key
  (:func:`sarl.cluster.store_access.store_policy`).

Registered in ``main.py`` as the ``tenant`` sub-app. Nothing here talks to a cluster.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Annotated, Any, Final

import typer
import yaml
from pydantic import ValidationError

from sarl.cli.options import fail
from sarl.cluster.store_access import store_policy
from sarl.cluster.tenancy import TENANT_SECRET, TenantKeys, TenantPolicy, platform_copy_name

#: Where an external store's secret key for ``--store-access-key-id`` is read from.
STORE_SECRET_ENV: Final = "SARL_TENANT_STORE_SECRET_KEY"
DEFAULT_PLATFORM_NAMESPACE: Final = "sarl-system"
#: Labels of the Secrets, so that an administrator can list what ``sarl tenant`` wrote.
SECRET_LABELS: Final = {"app.kubernetes.io/managed-by": "sarl", "app.kubernetes.io/part-of": "sarl"}

app = typer.Typer(help="Tenants of a shared cluster: their credentials and store policy.")

NamespaceArg = Annotated[str, typer.Argument(help="The tenant's namespace.", metavar="NS")]


@app.callback()
def _tenant() -> None:
    """Tenants of a shared cluster: their credentials and store policy."""


def checked_namespace(namespace: str) -> str:
    """``namespace`` if it is a namespace name, else typer.Exit with the reason."""
    try:
        return TenantPolicy(namespace=namespace).namespace
    except ValidationError as e:
        raise fail("; ".join(str(err["msg"]) for err in e.errors())) from None


def tenant_values(
    namespace: str, store_key_id: str | None, store_secret: str | None
) -> dict[str, str]:
    """Every key of :class:`TenantKeys` for ``namespace``: random secrets
    (``secrets.token_urlsafe(32)``), the store key id ``sarl-<ns>`` unless given, MLflow user
    ``namespace``."""
    values = {key: secrets.token_urlsafe(32) for key in TenantKeys.ALL}
    values[TenantKeys.STORE_ACCESS_KEY_ID] = store_key_id or f"sarl-{namespace}"
    if store_secret:
        values[TenantKeys.STORE_SECRET_ACCESS_KEY] = store_secret
    values[TenantKeys.MLFLOW_USERNAME] = namespace
    return values


def secret_manifests(
    namespace: str, platform_namespace: str, values: dict[str, str]
) -> list[dict[str, Any]]:
    """The tenant's Secret in ``namespace`` and its copy in ``platform_namespace``."""

    def secret(name: str, ns: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": ns, "labels": dict(SECRET_LABELS)},
            "type": "Opaque",
            "stringData": dict(values),
        }

    return [
        secret(TENANT_SECRET, namespace),
        secret(platform_copy_name(namespace), platform_namespace),
    ]


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` readable by its owner only (0600); an existing file is not overwritten
    (it may be another tenant's credentials)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise fail(f"--out {path}: exists; remove it or name a new file") from None
    except OSError as e:
        raise fail(f"--out {path}: {e.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


@app.command("credentials")
def credentials_command(
    namespace: NamespaceArg,
    platform_namespace: Annotated[
        str,
        typer.Option(
            "--platform-namespace",
            help="The platform's namespace (the chart's release's).",
            metavar="NAME",
        ),
    ] = DEFAULT_PLATFORM_NAMESPACE,
    store_access_key_id: Annotated[
        str | None,
        typer.Option(
            "--store-access-key-id",
            help=f"External S3: the access key id of the tenant's IAM user (its secret key in "
            f"{STORE_SECRET_ENV}). Default: sarl-NS, a user the bundled store's hook Job creates.",
            metavar="ID",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Write to this new file (mode 0600), not stdout.", metavar="FILE"
        ),
    ] = None,
) -> None:
    """Write the Secret manifests of tenant NS: `sarl-tenant` in NS and `sarl-tenant-NS` in
    the platform namespace (pipe to `kubectl apply -f -`)."""
    namespace = checked_namespace(namespace)
    checked_namespace(platform_namespace)
    store_secret = os.environ.get(STORE_SECRET_ENV, "")
    if store_access_key_id is not None and not store_access_key_id.strip():
        raise fail("--store-access-key-id: empty; give the IAM user's access key id")
    if store_access_key_id and not store_secret:
        raise fail(
            f"--store-access-key-id needs the key's secret in the environment variable "
            f"{STORE_SECRET_ENV} (never as an argument)"
        )
    values = tenant_values(namespace, store_access_key_id, store_secret or None)
    text = yaml.safe_dump_all(
        secret_manifests(namespace, platform_namespace, values), sort_keys=False
    )
    if output is None:
        typer.echo(text, nl=False)
        return
    _write_private(output, text)
    typer.echo(f"wrote {output} (mode 0600): apply it with `kubectl apply -f {output}`", err=True)


@app.command("store-policy")
def store_policy_command(
    namespace: NamespaceArg,
    bucket: Annotated[
        str, typer.Option("--bucket", help="The platform's bucket.", metavar="BUCKET")
    ],
) -> None:
    """Print the IAM policy of tenant NS's store key (JSON, for IAM or `mc admin policy
    create`): its own prefixes read-write, shared/ read-only."""
    namespace = checked_namespace(namespace)
    if not bucket.strip():
        raise fail("--bucket: empty; give the platform's bucket (objectStore.bucket)")
    typer.echo(json.dumps(store_policy(namespace, bucket), indent=2))
