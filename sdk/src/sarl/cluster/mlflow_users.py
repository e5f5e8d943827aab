"""Create each tenant's MLflow user on the platform's tracking server (MLflow's basic-auth app).

Called by the platform chart's hook Job (charts/sarl-platform/templates/mlflow-users-job.yaml,
after every install and upgrade) as::

    python -m sarl.cluster.mlflow_users --tracking-uri http://<release>-mlflow:5000 \\
        --tenants-dir /tenants

with the admin's credentials in ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` (the
chart's ``mlflow.auth.existingSecret``) and, under ``/tenants/<namespace>/``, the keys
``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD`` of each tenant's platform copy
Secret :func:`sarl.cluster.tenancy.platform_copy_name` mounted as files. It runs in the operator's
image, which holds this package and httpx; MLflow's image has neither sarl nor a test of this
code, and the job needs no Kubernetes API (the Secrets arrive as volumes).

For each tenant, idempotently (MLflow 3.17.2 ``mlflow/server/auth/__init__.py``: ``get_user``,
``create_user``, ``update_user_password``, ``get_current_user``):

1. ``GET /api/2.0/mlflow/users/get`` as the admin: missing -> ``POST users/create``;
2. present: the tenant's password is tried on ``GET users/current``; refused ->
   ``PATCH users/update-password`` (as the admin, which needs no current password). So a
   rotated Secret takes effect at the next ``helm upgrade``, and an unchanged one writes nothing.

A tenant Secret naming an MLflow admin (``admin``, say) is refused: resetting that password
would hand the tenant the whole server. No password is ever printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import httpx

from sarl.cluster.tenancy import TenantKeys
from sarl.http.retry import backoff_delay, is_transient_status, one_line

_API: Final = "/api/2.0/mlflow/users"
#: Seconds the job waits for the tracking server to answer /health (a fresh install starts
#: MLflow beside this hook).
READY_TIMEOUT_S: Final = 300.0

Outcome = Literal["created", "updated", "unchanged"]


class ProvisioningError(RuntimeError):
    """A tenant's user could not be created or updated; the message names the tenant."""


@dataclass(frozen=True)
class MlflowUser:
    """An MLflow basic-auth account (its password never shown by ``repr``)."""

    username: str
    password: str = field(repr=False)

    @property
    def auth(self) -> tuple[str, str]:
        return (self.username, self.password)


def read_user(directory: Path) -> MlflowUser | None:
    """The MLflow user of a mounted Secret (files named :class:`TenantKeys`' MLflow keys);
    None when the Secret is absent (its volume is optional: the tenant has no credentials yet)."""
    user_file = directory / TenantKeys.MLFLOW_USERNAME
    password_file = directory / TenantKeys.MLFLOW_PASSWORD
    if not (user_file.is_file() and password_file.is_file()):
        return None
    username, password = user_file.read_text().strip(), password_file.read_text().strip()
    if not username or not password:
        return None
    return MlflowUser(username, password)


@dataclass(frozen=True)
class UsersApi:
    """MLflow's user API at ``base_url`` as ``admin``; every request bounded by ``timeout_s``,
    transient failures (connection errors, 408/429/5xx) retried ``max_retries`` times."""

    base_url: str
    admin: MlflowUser
    timeout_s: float = 10.0
    max_retries: int = 3
    backoff_s: float = 0.5
    transport: httpx.BaseTransport | None = None
    sleep: Callable[[float], None] = time.sleep

    def call(
        self, method: str, path: str, *, auth: tuple[str, str] | None = None, **kwargs: Any
    ) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of one request, retried while transient."""
        url = f"{self.base_url.rstrip('/')}{path}"
        cause = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.sleep(backoff_delay(attempt, self.backoff_s, 8.0))
            try:
                with httpx.Client(timeout=self.timeout_s, transport=self.transport) as client:
                    response = client.request(method, url, auth=auth or self.admin.auth, **kwargs)
            except httpx.HTTPError as e:
                cause = f"{type(e).__name__}: {e}"
                continue
            if is_transient_status(response.status_code):
                cause = f"HTTP {response.status_code}"
                continue
            try:
                body = response.json() if response.content else {}
            except ValueError:
                body = {"message": one_line(response.text)}
            return response.status_code, body if isinstance(body, dict) else {}
        raise ProvisioningError(f"MLflow {url}: {cause} (after {self.max_retries + 1} attempts)")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until ``/health`` answers 200; ProvisioningError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with httpx.Client(timeout=self.timeout_s, transport=self.transport) as client:
                    if client.get(f"{self.base_url.rstrip('/')}/health").status_code == 200:
                        return
            except httpx.HTTPError:
                pass  # not up yet
            if time.monotonic() >= deadline:
                raise ProvisioningError(
                    f"MLflow at {self.base_url} not healthy after {timeout_s:g} s"
                )
            self.sleep(2.0)


def _refused(
    status: int, body: Mapping[str, Any], what: str, user: MlflowUser
) -> ProvisioningError:
    # MLflow's messages name the rule ("Password must be at least 12 characters."); the
    # password is masked in case a future one echoes it.
    detail = one_line(str(body.get("message") or body.get("error_code") or ""))
    detail = detail.replace(user.password, "***")
    hint = (
        ": the admin credentials (mlflow.auth.existingSecret) are wrong or not an admin's"
        if status in (401, 403)
        else ""
    )
    return ProvisioningError(f"{what}: HTTP {status} {detail}{hint}")


def ensure_user(api: UsersApi, user: MlflowUser, namespace: str) -> Outcome:
    """Create ``user`` or bring its password up to date (see the module docstring)."""
    what = f"tenant {namespace}: MLflow user {user.username!r}"
    status, body = api.call("GET", f"{_API}/get", params={"username": user.username})
    if status == 200:
        if (body.get("user") or {}).get("is_admin"):
            raise ProvisioningError(
                f"{what} is an MLflow admin; a tenant's user never is: set another "
                f"{TenantKeys.MLFLOW_USERNAME} in its Secret"
            )
        current, _ = api.call("GET", f"{_API}/current", auth=user.auth)
        if current == 200:
            return "unchanged"
        status, body = api.call(
            "PATCH",
            f"{_API}/update-password",
            json={"username": user.username, "password": user.password},
        )
        if status != 200:
            raise _refused(status, body, f"{what}: updating its password", user)
        return "updated"
    if body.get("error_code") != "RESOURCE_DOES_NOT_EXIST":
        raise _refused(status, body, f"{what}: looking it up", user)
    status, body = api.call(
        "POST", f"{_API}/create", json={"username": user.username, "password": user.password}
    )
    if status != 200:
        raise _refused(status, body, f"{what}: creating it", user)
    return "created"


def provision(api: UsersApi, tenants_dir: Path) -> tuple[list[str], list[str]]:
    """Ensure the user of every tenant mounted under ``tenants_dir/<namespace>``: (report lines,
    errors). A tenant without credentials yet is reported and skipped, not an error."""
    lines: list[str] = []
    errors: list[str] = []
    # One directory per tenant Secret volume (names starting with "." are the kubelet's).
    directories = sorted(
        p for p in tenants_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    for directory in directories:
        namespace = directory.name
        user = read_user(directory)
        if user is None:
            lines.append(
                f"{namespace}: no MLflow credentials yet (create them with `sarl tenant "
                f"credentials {namespace}`, then `helm upgrade`)"
            )
            continue
        try:
            outcome = ensure_user(api, user, namespace)
        except ProvisioningError as e:
            errors.append(str(e))
            continue
        lines.append(f"{namespace}: MLflow user {user.username!r} {outcome}")
    return lines, errors


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """The hook Job's entry point; exit 1 when any tenant's user could not be ensured."""
    parser = argparse.ArgumentParser(prog="python -m sarl.cluster.mlflow_users")
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--tenants-dir", type=Path, required=True)
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT_S)
    args = parser.parse_args(argv)
    env = os.environ if env is None else env
    username = env.get(TenantKeys.MLFLOW_USERNAME, "")
    password = env.get(TenantKeys.MLFLOW_PASSWORD, "")
    if not username or not password:
        print(
            f"{TenantKeys.MLFLOW_USERNAME}/{TenantKeys.MLFLOW_PASSWORD}: the MLflow admin's "
            "credentials are not set (chart: mlflow.auth.existingSecret)",
            file=sys.stderr,
        )
        return 1
    api = UsersApi(args.tracking_uri, MlflowUser(username, password))
    try:
        api.wait_ready(args.ready_timeout)
        lines, errors = provision(api, args.tenants_dir)
    except (ProvisioningError, OSError) as e:
        print(str(e), file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    for error in errors:
        print(error, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
