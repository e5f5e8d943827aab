"""Tenancy, object store: team-a's key cannot reach team-b's checkpoints (issue 36, attack 2).

The S3 server is moto's, enforcing IAM in its own process (tests/support/iam_s3_server.py: SigV4
and the caller's policies checked on every request; ``s3:prefix`` conditions evaluated as AWS
documents them, which moto 5.2.5 skips). Each tenant is an IAM user with the policy
``sarl tenant store-policy`` prints (:func:`sarl.cluster.store_access.store_policy`), as the
bundled store's hook Job or an external store's administrator attaches it; the platform bucket
holds team-b's checkpoint, the platform's MLflow artifacts and a shared model. Requests go
through minio-py, the client sarl's stores use, and sarl's own checkpoint store. The operator's
refusal of a spec naming team-b's prefix is the real check module behind the webhook and the
handlers (``sarl_operator.tenant_policy.violations``).
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from minio import Minio
from minio.error import S3Error

from sarl.cluster.store_access import store_policy
from sarl.cluster.tenancy import Tenancy, TenantPolicy
from sarl.spec.loader import load_experiment
from sarl_operator import tenant_policy
from sarl_operator.platform_settings import Platform

pytest.importorskip("moto")  # the dev extra; the verl environment has none
boto3 = pytest.importorskip("boto3")

REPO = Path(__file__).resolve().parents[2]
BUCKET = "sarl"
REGION = "us-east-1"
VICTIM_CHECKPOINT = "checkpoints/team-b/exp-b/step-00000010/manifest.json"
MLFLOW_ARTIFACT = "mlflow/1/abc/artifacts/model.pt"
SHARED_MODEL = "shared/models/qwen/config.json"


@dataclass(frozen=True)
class Store:
    endpoint: str
    keys: dict[str, tuple[str, str]]  # user -> (access key id, secret)

    def client(self, user: str) -> Minio:
        key_id, secret = self.keys[user]
        host = self.endpoint.removeprefix("http://")
        return Minio(host, access_key=key_id, secret_key=secret, secure=False, region=REGION)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _setup(endpoint: str) -> dict[str, tuple[str, str]]:
    """Bucket, objects, the two tenants' IAM users with their policies, an admin; then IAM on."""
    session = boto3.session.Session(
        aws_access_key_id="setup", aws_secret_access_key="setup", region_name=REGION
    )
    s3 = session.client("s3", endpoint_url=endpoint)
    iam = session.client("iam", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    for key in (VICTIM_CHECKPOINT, MLFLOW_ARTIFACT, SHARED_MODEL):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"original")
    admin_policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}  # fmt: skip
    documents = {"admin": admin_policy}
    documents |= {ns: store_policy(ns, BUCKET) for ns in ("team-a", "team-b")}
    keys = {}
    for user, document in documents.items():
        iam.create_user(UserName=user)
        arn = iam.create_policy(PolicyName=f"sarl-{user}", PolicyDocument=json.dumps(document))
        iam.attach_user_policy(UserName=user, PolicyArn=arn["Policy"]["Arn"])
        key = iam.create_access_key(UserName=user)["AccessKey"]
        keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])

    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=b"0",
        method="POST",
        headers={"Content-Type": "text/plain"},  # a form body would leave moto's data empty
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # every request checked now
        assert response.status == 200
    return keys


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.iam_s3_server", str(port)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        endpoint = f"http://127.0.0.1:{port}"
        yield Store(endpoint, _setup(endpoint))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def _denied(call: Callable[[], object]) -> str:
    with pytest.raises(S3Error) as refused:
        result = call()
        if isinstance(result, Iterator):
            list(result)  # listings are lazy
    return str(refused.value.code)


def _read(client: Minio, key: str) -> bytes:
    response = client.get_object(BUCKET, key)
    try:
        return bytes(response.read())
    finally:
        response.close()
        response.release_conn()


@pytest.mark.parametrize("key", [VICTIM_CHECKPOINT, MLFLOW_ARTIFACT])
def test_a_cannot_read_write_or_delete_b_or_platform_objects(store: Store, key: str) -> None:
    """Attack: with its own key, team-a reads, overwrites (plants a checkpoint) and deletes
    team-b's checkpoint and the platform's MLflow artifacts. Refused (AccessDenied) every time,
    the objects unchanged."""
    a = store.client("team-a")
    assert _denied(lambda: _read(a, key)) == "AccessDenied"
    assert _denied(lambda: a.stat_object(BUCKET, key)) in ("AccessDenied", "ResponseCode403")
    planted = io.BytesIO(b"planted")
    assert _denied(lambda: a.put_object(BUCKET, key, planted, 7)) == "AccessDenied"
    assert _denied(lambda: a.remove_object(BUCKET, key)) == "AccessDenied"
    assert _read(store.client("admin"), key) == b"original"


def test_a_cannot_batch_delete_b_checkpoints(store: Store) -> None:
    """Attack: team-a prunes team-b's checkpoints with one DeleteObjects request (what
    ``keep_last`` pruning sends). Each key is refused; team-b's checkpoint is still there."""
    from minio.deleteobjects import DeleteObject

    errors = list(store.client("team-a").remove_objects(BUCKET, [DeleteObject(VICTIM_CHECKPOINT)]))
    assert [e.code for e in errors] == ["AccessDenied"]
    assert _read(store.client("admin"), VICTIM_CHECKPOINT) == b"original"


@pytest.mark.parametrize("prefix", ["checkpoints/team-b/", "checkpoints/", "mlflow/", None])
def test_a_cannot_list_b_or_the_bucket(store: Store, prefix: str | None) -> None:
    """Attack: team-a lists team-b's checkpoints, all checkpoints, MLflow's artifacts or the
    whole bucket to find what to take. Refused: its key lists only its own prefixes."""
    a = store.client("team-a")
    code = _denied(lambda: a.list_objects(BUCKET, prefix=prefix, recursive=True))
    assert code == "AccessDenied"


def test_a_uses_its_own_prefixes_and_reads_shared(store: Store, tmp_path: Path) -> None:
    """team-a's own work goes on: sarl's checkpoint store saves, lists and loads under
    checkpoints/team-a/ with team-a's key; objects under data/ and models/ of team-a are written
    and deleted; shared/ is read but never written."""
    from sarl.storage import open_store

    a = store.client("team-a")
    key_id, secret = store.keys["team-a"]
    checkpoints = open_store(
        f"s3://{BUCKET}/checkpoints/team-a/exp-a",
        endpoint_url=store.endpoint,
        access_key=key_id,
        secret_key=secret,
    )
    # The trainer's pre-run check with a key limited to its prefix (S3 authorises HeadBucket
    # as an s3:ListBucket without prefix, which the policy refuses).
    checkpoints.check_access()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "weights.safetensors").write_bytes(b"weights")
    checkpoints.save(3, tmp_path / "out", {"step": 3})
    latest = checkpoints.latest()
    assert latest is not None and latest.step == 3
    for key in ("data/team-a/train.parquet", "models/team-a/m/config.json"):
        a.put_object(BUCKET, key, io.BytesIO(b"mine"), 4)
        assert _read(a, key) == b"mine"
        a.remove_object(BUCKET, key)
    assert _read(a, SHARED_MODEL) == b"original"
    names = [o.object_name for o in a.list_objects(BUCKET, prefix="shared/", recursive=True)]
    assert names == [SHARED_MODEL]
    assert _denied(lambda: a.put_object(BUCKET, SHARED_MODEL, io.BytesIO(b"x"), 1))
    assert _read(store.client("admin"), SHARED_MODEL) == b"original"


def test_operator_refuses_b_checkpoint_uri_in_a() -> None:
    """Attack: an Experiment in team-a sets ``spec.storage.checkpoint_uri`` to team-b's prefix
    (to resume from a planted checkpoint, or prune team-b's with ``keep_last``). The tenant
    policy refuses it, naming the field and team-a's own prefixes."""
    platform = Platform(
        s3_bucket=BUCKET,
        tenancy=Tenancy(
            tenants=(TenantPolicy(namespace="team-a"), TenantPolicy(namespace="team-b"))
        ),
    )
    exp = load_experiment(
        {
            "apiVersion": "sarl.dev/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "steal"},
            "spec": {"storage": {"checkpoint_uri": f"s3://{BUCKET}/checkpoints/team-b/x"}},
        }
    )
    messages = tenant_policy.violations(exp, "team-a", platform)
    assert len(messages) == 1
    assert messages[0].startswith("spec.storage.checkpoint_uri 's3://sarl/checkpoints/team-b/x'")
    assert "s3://sarl/checkpoints/team-a/..." in messages[0]
    assert tenant_policy.violations(exp, "team-b", platform) == []
