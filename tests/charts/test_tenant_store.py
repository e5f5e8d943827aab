"""The bundled store's per-tenant users (charts/sarl-platform: minio-tenant-users-job.yaml,
minio-tenant-policies.yaml, _tenant-store.tpl), rendered with the real Helm engine.

The hook Job's script is also run, under /bin/sh, against a stand-in ``mc`` that records its
arguments (no MinIO server or Kubernetes runs here): it must create the user, the policy and
the attachment of every tenant, accept an attachment already in effect (mc's message for a
re-run, minio/mc PR 4602 and ricsanfre/ansible-role-minio issue 15), and stop naming the command
that creates a missing Secret.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sarl.cluster.store_access import store_policy
from tests.charts.rendering import PLATFORM, render_templates
from tests.support.pod_security import violations

pytest.importorskip("helm_python")

#: mc's error when the attachment exists (ricsanfre/ansible-role-minio issue 15).
ALREADY_ATTACHED = (
    "mc: <ERROR> Unable to make user/group policy association. "
    "The specified policy change is already in effect. (Specified policy update has no net effect)."
)
TENANTS = {"tenants": [{"namespace": "team-a"}, {"namespace": "team-b"}]}


def _objects(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rendered = render_templates(PLATFORM, values)
    docs = [
        d
        for path, text in rendered.items()
        if "minio-tenant" in path  # this store's templates (not MLflow's tenant objects)
        for d in yaml.safe_load_all(text)
        if d
    ]
    return {d["kind"]: d for d in docs}


def test_chart_policy_equals_the_python_policy() -> None:
    values = {**TENANTS, "objectStore": {"bucket": "team-store"}}
    data = _objects(values)["ConfigMap"]["data"]
    assert set(data) == {"team-a.json", "team-b.json"}
    for ns in ("team-a", "team-b"):
        assert json.loads(data[f"{ns}.json"]) == store_policy(ns, "team-store")


def test_hook_job_after_the_bucket_job_with_each_tenant_copy() -> None:
    job = _objects(TENANTS)["Job"]
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
    assert int(annotations["helm.sh/hook-weight"]) > 0  # the bucket Job has weight 0
    pod = job["spec"]["template"]["spec"]
    secrets = [v["secret"] for v in pod["volumes"] if "secret" in v]
    assert [s["secretName"] for s in secrets] == ["sarl-tenant-team-a", "sarl-tenant-team-b"]
    assert all(
        {i["key"] for i in s["items"]} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        for s in secrets
    )
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["TENANTS"]["value"] == "team-a team-b"
    # The root key comes from the platform's Secret, in the platform namespace only.
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "sarl-s3-credentials"


def test_hook_job_passes_pss_restricted() -> None:
    pod = _objects(TENANTS)["Job"]["spec"]["template"]["spec"]
    assert violations(pod) == []


@pytest.mark.parametrize(
    "values",
    [
        {},
        {
            **TENANTS,
            "objectStore": {"provider": "external", "external": {"endpoint": "https://s3.example"}},
        },
    ],
)
def test_not_rendered_without_tenants_or_bundled_store(values: dict[str, Any]) -> None:
    assert _objects(values) == {}


def _run_script(
    tmp_path: Path, tenants: dict[str, str], attach_output: str, attach_rc: int
) -> subprocess.CompletedProcess[str]:
    job = _objects({"tenants": [{"namespace": ns} for ns in tenants]})["Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    script = container["args"][0].replace("/etc/sarl-tenants", str(tmp_path / "tenants"))
    script = script.replace("/etc/sarl-tenant-policies", str(tmp_path / "policies"))
    for ns, key_id in tenants.items():
        creds = tmp_path / "tenants" / ns
        creds.mkdir(parents=True)
        if key_id:
            (creds / "AWS_ACCESS_KEY_ID").write_text(key_id)
            (creds / "AWS_SECRET_ACCESS_KEY").write_text(f"secret-of-{ns}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mc = bin_dir / "mc"
    mc.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path / "calls"}\n'
        f'case "$*" in *"policy attach"*) echo "{attach_output}"; exit {attach_rc};; esac\n'
    )
    mc.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TENANTS": " ".join(tenants)}
    env |= {"S3_ENDPOINT": "http://minio:9000", "POD_NAMESPACE": "sarl"}
    env |= {"AWS_ACCESS_KEY_ID": "root", "AWS_SECRET_ACCESS_KEY": "root-secret"}
    return subprocess.run(
        [*container["command"], script],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("output", "rc"),
    [("Attached Policies: [sarl-tenant-team-a]", 0), (ALREADY_ATTACHED, 1)],
)
def test_script_creates_user_policy_and_attachment_idempotently(
    tmp_path: Path, output: str, rc: int
) -> None:
    proc = _run_script(tmp_path, {"team-a": "sarl-team-a", "team-b": "sarl-team-b"}, output, rc)
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].endswith("alias set sarl http://minio:9000 root root-secret")
    assert "--config-dir /tmp/.mc admin user add sarl sarl-team-a secret-of-team-a" in calls
    policy = tmp_path / "policies" / "team-b.json"
    assert f"--config-dir /tmp/.mc admin policy create sarl sarl-tenant-team-b {policy}" in calls
    assert (
        "--config-dir /tmp/.mc admin policy attach sarl sarl-tenant-team-b --user sarl-team-b"
        in calls
    )
    assert "secret-of" not in proc.stdout + proc.stderr  # never echoes a secret


def test_script_stops_on_another_attach_error(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, {"team-a": "sarl-team-a"}, "mc: <ERROR> policy not found", 1)
    assert proc.returncode == 1
    assert "tenant team-a: mc: <ERROR> policy not found" in proc.stderr


def test_script_names_the_command_for_a_missing_secret(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, {"team-a": ""}, "", 0)
    assert proc.returncode == 1
    assert "Secret sarl-tenant-team-a" in proc.stderr
    assert (
        "sarl tenant credentials team-a --platform-namespace sarl | kubectl apply -f -"
        in proc.stderr
    )
