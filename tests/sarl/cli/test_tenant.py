"""``sarl tenant credentials`` and ``sarl tenant store-policy`` (sdk/src/sarl/cli/tenant.py): the
Secret manifests of a new tenant and its store key's IAM policy.

Run in-process through typer's CliRunner (the command's own code, stdout and exit code), except
one subprocess run of the installed ``sarl`` that shows the sub-command is registered.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.cluster.store_access import store_policy
from sarl.cluster.tenancy import TENANT_SECRET, TenantKeys
from tests.sarl.cli.conftest import RunCli

runner = CliRunner()


def _secrets(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_credentials_writes_both_secrets_with_every_key() -> None:
    result = runner.invoke(app, ["tenant", "credentials", "team-a"], env={})
    assert result.exit_code == 0, result.output
    tenant, copy = _secrets(result.stdout)
    assert (tenant["metadata"]["name"], tenant["metadata"]["namespace"]) == (
        TENANT_SECRET,
        "team-a",
    )
    assert (copy["metadata"]["name"], copy["metadata"]["namespace"]) == (
        "sarl-tenant-team-a",
        "sarl-system",
    )
    values = tenant["stringData"]
    assert values == copy["stringData"]
    assert set(values) == set(TenantKeys.ALL)
    assert values[TenantKeys.STORE_ACCESS_KEY_ID] == "sarl-team-a"
    assert values[TenantKeys.MLFLOW_USERNAME] == "team-a"
    randoms = [
        v
        for k, v in values.items()
        if k not in (TenantKeys.STORE_ACCESS_KEY_ID, TenantKeys.MLFLOW_USERNAME)
    ]
    assert len(set(randoms)) == len(randoms) and all(len(v) >= 43 for v in randoms)


def test_credentials_are_fresh_each_time() -> None:
    first = runner.invoke(app, ["tenant", "credentials", "team-a"], env={}).stdout
    second = runner.invoke(app, ["tenant", "credentials", "team-a"], env={}).stdout
    key = TenantKeys.STORE_SECRET_ACCESS_KEY
    assert _secrets(first)[0]["stringData"][key] != _secrets(second)[0]["stringData"][key]


def test_external_store_key_from_argument_and_environment() -> None:
    """External S3: the IAM user's key id as an option, its secret only from the environment."""
    args = ["tenant", "credentials", "team-a", "--platform-namespace", "platform"]
    args += ["--store-access-key-id", "AKIATEAMA"]
    result = runner.invoke(app, args, env={"SARL_TENANT_STORE_SECRET_KEY": "iam-secret"})
    assert result.exit_code == 0, result.output
    tenant, copy = _secrets(result.stdout)
    assert copy["metadata"]["namespace"] == "platform"
    assert tenant["stringData"][TenantKeys.STORE_ACCESS_KEY_ID] == "AKIATEAMA"
    assert tenant["stringData"][TenantKeys.STORE_SECRET_ACCESS_KEY] == "iam-secret"


def test_external_key_without_its_secret_is_refused() -> None:
    args = ["tenant", "credentials", "team-a", "--store-access-key-id", "AKIATEAMA"]
    result = runner.invoke(app, args, env={"SARL_TENANT_STORE_SECRET_KEY": ""})
    assert result.exit_code == 2
    assert (
        "SARL_TENANT_STORE_SECRET_KEY" in result.output and "never as an argument" in result.output
    )


def test_output_file_is_private_and_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "team-a.yaml"
    result = runner.invoke(app, ["tenant", "credentials", "team-a", "-o", str(out)], env={})
    assert result.exit_code == 0, result.output
    assert result.stdout == ""  # the values only in the file
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert len(_secrets(out.read_text())) == 2
    again = runner.invoke(app, ["tenant", "credentials", "team-a", "-o", str(out)], env={})
    assert again.exit_code == 2 and "exists" in again.output


@pytest.mark.parametrize("namespace", ["Team-A", "team_a", "a-", "a" * 64])
def test_not_a_namespace_is_refused(namespace: str) -> None:
    result = runner.invoke(app, ["tenant", "credentials", namespace], env={})
    assert result.exit_code == 2
    assert "namespace name" in result.output


def test_store_policy_prints_the_tenant_policy() -> None:
    result = runner.invoke(app, ["tenant", "store-policy", "team-a", "--bucket", "sarl"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == store_policy("team-a", "sarl")


def test_installed_command_has_the_tenant_group(run_cli: RunCli) -> None:
    proc = run_cli("tenant", "store-policy", "team-b", "--bucket", "b")
    assert proc.returncode == 0, proc.stderr
    assert "arn:aws:s3:::b/checkpoints/team-b/*" in proc.stdout
