"""``sarl submit|status|logs|delete|wait``: outputs and exit codes (0 ok, 1 cluster error or
Failed, 2 invalid spec/usage), through typer's CliRunner against the in-memory API server
(tests.support.kube_server, real HTTP; see conftest). Errors are one ``error:`` line."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sarl.cli.main import app
from tests.sarl.cluster.conftest import experiment_doc, set_status, set_status_once_created
from tests.support.kube_server import EXPERIMENTS, SARL_RESOURCES, KubeServer, kube_server


@pytest.fixture
def sarl(kubeconfig: Path) -> Any:
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig)])

    return run


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment_doc("cli-exp")))
    return path


def _one_error_line(result: Any, text: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.stderr


def test_submit_then_again_then_replace(sarl: Any, spec_file: Path, ns: str) -> None:
    first = sarl("submit", str(spec_file))
    assert first.exit_code == 0, first.stderr
    assert first.stdout.strip() == f"experiment cli-exp created in namespace {ns}"
    again = sarl("submit", str(spec_file))
    assert again.exit_code == 1
    _one_error_line(again, f"experiment cli-exp already exists in namespace {ns}")
    replaced = sarl("submit", str(spec_file), "--replace")
    assert replaced.exit_code == 0
    assert replaced.stdout.strip() == f"experiment cli-exp replaced in namespace {ns}"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (yaml.safe_dump(experiment_doc("bad", algorithm={"name": "nope"})), "spec.algorithm"),
        ("kind: [\n", "invalid YAML"),
    ],
)
def test_invalid_spec_exits_2_and_creates_nothing(
    sarl: Any, server: KubeServer, ns: str, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = sarl("submit", str(path))
    assert result.exit_code == 2
    _one_error_line(result, message)
    assert server.objects(EXPERIMENTS, ns) == {}


def test_status_table_details_and_empty(
    sarl: Any, server: KubeServer, ns: str, tmp_path: Path
) -> None:
    empty = sarl("status")
    assert empty.exit_code == 0 and f"No experiments found in namespace {ns}." in empty.stderr
    for name in ("exp-b", "exp-a"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(experiment_doc(name)))
        assert sarl("submit", str(path)).exit_code == 0
    status = {
        "phase": "Running",
        "lastStep": 12,
        "lastReward": 0.4123,
        "mlflowRunUrl": "http://mlflow.local/#/experiments/1/runs/r1",
        "conditions": [{"type": "TrainingRunning", "status": "True", "reason": "JobRunning"}],
    }
    set_status(server, ns, "exp-a", status)
    table = sarl("status")
    assert table.exit_code == 0, table.stderr
    rows = [line.split() for line in table.stdout.strip().splitlines()]
    assert rows[0] == ["NAME", "PHASE", "STEP", "REWARD", "MLFLOW", "AGE"]
    assert rows[1][:5] == ["exp-a", "Running", "12", "0.4123", status["mlflowRunUrl"]]
    assert rows[2][:5] == ["exp-b", "-", "-", "-", "-"]
    wide = sarl("status", "-A")
    assert wide.stdout.splitlines()[0].split()[0] == "NAMESPACE"
    assert any(line.split()[:2] == [ns, "exp-a"] for line in wide.stdout.splitlines())
    one = sarl("status", "exp-a")
    assert one.exit_code == 0
    assert "Phase:         Running" in one.stdout
    assert "  TrainingRunning=True JobRunning" in one.stdout
    assert sarl("status", "exp-a", "-A").exit_code == 2


def test_logs_delete_and_not_found(
    sarl: Any, server: KubeServer, kubeconfig: Path, ns: str, spec_file: Path
) -> None:
    assert sarl("submit", str(spec_file)).exit_code == 0
    nopod = sarl("logs", "cli-exp")
    assert nopod.exit_code == 1
    _one_error_line(nopod, "no master pod (index 0) of experiment cli-exp")
    waited = sarl("logs", "cli-exp", "-f", "--pod-timeout", "0.3")
    assert waited.exit_code == 1
    said = waited.stderr.strip().splitlines()
    assert said[0] == "waiting for the master pod of cli-exp (phase: -)"  # once per phase
    assert len(said) == 2 and said[1].startswith("error: no master pod"), waited.stderr
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    labels = {
        "training.kubeflow.org/job-name": "cli-exp",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
    }
    pod = {"metadata": {"name": "cli-exp-master-0", "labels": labels}, "spec": {"containers": []}}
    client.CoreV1Api(api).create_namespaced_pod(ns, pod)
    server.set_log(ns, "cli-exp-master-0", "step 1 reward 0.1\nstep 2 reward 0.2\n")
    logs = sarl("logs", "cli-exp", "--tail", "2")
    assert logs.exit_code == 0 and logs.stdout == "step 1 reward 0.1\nstep 2 reward 0.2\n"
    deleted = sarl("delete", "cli-exp", "--wait", "--timeout", "5")
    assert deleted.exit_code == 0
    assert deleted.stdout.strip() == f"experiment cli-exp deleted from namespace {ns}"
    again = sarl("delete", "cli-exp")
    assert again.exit_code == 1
    _one_error_line(again, f"experiment cli-exp not found in namespace {ns}")
    assert sarl("logs", "cli-exp", "--replica", "chief").exit_code == 2


def test_wait_and_submit_wait_exit_codes(
    sarl: Any, server: KubeServer, ns: str, spec_file: Path
) -> None:
    operator = set_status_once_created(server, ns, "cli-exp", {"phase": "Succeeded"})
    ok = sarl("submit", str(spec_file), "--wait", "--interval", "0.05", "--timeout", "10")
    operator.join()
    assert ok.exit_code == 0, ok.stderr
    assert ok.stdout.strip().splitlines()[-1] == "experiment cli-exp Succeeded"
    assert "cli-exp: Succeeded" in ok.stderr  # the progress line (not a terminal: one per change)
    failed = {
        "phase": "Failed",
        "conditions": [{"type": "Ready", "status": "False", "message": "NCCL timeout"}],
    }
    set_status(server, ns, "cli-exp", failed)
    bad = sarl("wait", "cli-exp", "--interval", "0.05")
    assert bad.exit_code == 1 and "error: experiment cli-exp Failed: NCCL timeout" in bad.stderr
    set_status(server, ns, "cli-exp", {"phase": "Running"})
    slow = sarl("wait", "cli-exp", "--for", "Succeeded", "--timeout", "0.2", "--interval", "0.05")
    assert slow.exit_code == 1
    assert "is Running after 0.2s of waiting for Succeeded" in slow.stderr
    assert sarl("wait", "cli-exp", "--for", "Done").exit_code == 2


@pytest.fixture(scope="module")
def no_crd() -> Iterator[KubeServer]:
    with kube_server(tuple(r for r in SARL_RESOURCES if r is not EXPERIMENTS)) as ks:
        yield ks


def test_cluster_problems_are_one_line_with_exit_1(
    no_crd: KubeServer, tmp_path: Path, spec_file: Path
) -> None:
    runner = CliRunner()
    kc = no_crd.kubeconfig(tmp_path / "kc")
    missing = runner.invoke(app, ["submit", str(spec_file), "--kubeconfig", str(kc)])
    assert missing.exit_code == 1
    _one_error_line(
        missing, "install the sarl platform chart (helm install sarl charts/sarl-platform)"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc = yaml.safe_load(kc.read_text())
    doc["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    (tmp_path / "closed").write_text(yaml.safe_dump(doc))
    down = runner.invoke(app, ["status", "--kubeconfig", str(tmp_path / "closed")])
    assert down.exit_code == 1
    _one_error_line(down, f"cannot reach the Kubernetes API at http://127.0.0.1:{port}")
    nokc = runner.invoke(app, ["status", "--kubeconfig", str(tmp_path / "none")])
    assert nokc.exit_code == 1
    _one_error_line(nokc, "no kubeconfig found")
