"""The hook Job's entry point (sarl.cluster.mlflow_users.main) before it reaches MLflow: what it
says without the admin's credentials, and which mounted tenant Secrets it skips. Creating and
updating users on the real server: tests/tenancy/test_mlflow.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.cluster.mlflow_users import MlflowUser, main, read_user


def test_without_admin_credentials_it_names_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--tracking-uri", "http://mlflow", "--tenants-dir", str(tmp_path)], env={})
    assert code == 1
    assert "mlflow.auth.existingSecret" in capsys.readouterr().err


def test_a_tenant_without_credentials_yet_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "team-a").mkdir()
    assert read_user(tmp_path / "team-a") is None
    (tmp_path / "team-a" / "MLFLOW_TRACKING_USERNAME").write_text("team-a\n")
    (tmp_path / "team-a" / "MLFLOW_TRACKING_PASSWORD").write_text("pw-0123456789\n")
    user = read_user(tmp_path / "team-a")
    assert user == MlflowUser("team-a", "pw-0123456789")
    assert "pw-0123456789" not in repr(user)
