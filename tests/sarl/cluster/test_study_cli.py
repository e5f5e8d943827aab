"""``sarl submit|status|wait|delete`` with Studies: dispatch on ``kind``, NAME looked up as an
Experiment then a Study (or ``--kind``), outputs and exit codes, through typer's CliRunner
against the in-memory Kubernetes API server (kmock's emulation with ``studies`` declared; no
real cluster here, see conftest and study_server.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sarl.cli.main import app
from tests.sarl.cluster.conftest import experiment_doc, set_status
from tests.sarl.cluster.study_server import (
    RUNNING,
    STUDIES,
    WITH_STUDIES,
    set_study_status,
    study_doc,
)
from tests.support.kube_server import KubeServer, kube_server

_AGE = re.compile(r"\b\d+[smhd]\b")


def _without_ages(text: str) -> str:
    return _AGE.sub("<age>", text)


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "studies" / "sarl-math.yaml"


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server(WITH_STUDIES) as ks:
        yield ks


@pytest.fixture
def sarl(kubeconfig: Path) -> Any:
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig)])

    return run


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _one_error_line(result: Any, text: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.stderr


def test_submit_a_study_file(sarl: Any, server: KubeServer, ns: str) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    result = sarl("submit", str(EXAMPLE))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == (
        f"study sarl-math created in namespace {ns}: 18 runs (6 arms x 3 seeds), at most 2 at once"
    )
    assert "sarl-math" in server.objects(STUDIES, ns)
    again = sarl("submit", str(EXAMPLE))
    assert again.exit_code == 1
    _one_error_line(again, f"study sarl-math already exists in namespace {ns}")
    replaced = sarl("submit", str(EXAMPLE), "--replace")
    assert replaced.exit_code == 0 and replaced.stdout.startswith("study sarl-math replaced")


def test_an_invalid_study_exits_2_naming_the_field(
    sarl: Any, server: KubeServer, ns: str, tmp_path: Path
) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    doc = study_doc("bad", reference="nope")
    result = sarl("submit", str(_write(tmp_path, doc)))
    assert result.exit_code == 2
    _one_error_line(result, "spec.reference='nope': is not an arm")
    assert server.objects(STUDIES, ns) == {}


def test_status_of_a_study_by_name_and_listed(
    sarl: Any, server: KubeServer, ns: str, tmp_path: Path
) -> None:
    """The Kubernetes API server is an in-memory emulation; the test writes the status and a
    run the operator would."""
    assert sarl("submit", str(_write(tmp_path, study_doc("cmp", parallelism=2)))).exit_code == 0
    set_study_status(server, ns, "cmp", RUNNING)
    run = experiment_doc("cmp-low-s0")
    run["metadata"]["labels"] = {
        "sarl.dev/study": "cmp",
        "sarl.dev/arm": "low",
        "sarl.dev/seed": "0",
    }
    assert sarl("submit", str(_write(tmp_path, run))).exit_code == 0
    set_status(server, ns, "cmp-low-s0", {"phase": "Running", "lastStep": 3})

    shown = sarl("status", "cmp")  # no Experiment is named cmp: the Study is shown
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "Phase:         Running" in lines
    assert "Runs:          4 total: 1 pending, 2 running, 1 succeeded, 0 failed" in lines
    assert "MLflow run:    http://mlflow.local/#/experiments/3/runs/p1" in lines
    assert "Reference:     low" in lines and "Parallelism:   2" in lines
    assert lines[lines.index("Experiments:") + 2].split() == [
        "cmp-low-s0",
        "low",
        "0",
        "Running",
        "3",
        "-",
    ]
    # The same view; ages ("0s", "1s") may tick between the two commands on a busy machine.
    again = sarl("status", "cmp", "--kind", "study").stdout
    assert _without_ages(again) == _without_ages(shown.stdout)

    listed = sarl("status", "--kind", "study")
    rows = [line.split() for line in listed.stdout.strip().splitlines()]
    assert rows[0] == [
        "NAME",
        "PHASE",
        "TOTAL",
        "PENDING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "MLFLOW",
        "AGE",
    ]
    assert rows[1][:8] == ["cmp", "Running", "4", "1", "2", "1", "0", RUNNING["mlflowRunUrl"]]
    experiments = sarl("status")  # without --kind the list is the Experiments, as before
    assert experiments.stdout.splitlines()[1].split()[0] == "cmp-low-s0"


def test_a_name_that_is_neither_is_one_error_line(sarl: Any, ns: str) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    for command in (["status", "nothing"], ["delete", "nothing"], ["wait", "nothing"]):
        result = sarl(*command)
        assert result.exit_code == 1
        _one_error_line(result, f"experiment or study nothing not found in namespace {ns}")
    explicit = sarl("status", "nothing", "--kind", "study")
    _one_error_line(explicit, f"study nothing not found in namespace {ns}")


def test_wait_then_delete_a_study(sarl: Any, server: KubeServer, ns: str, tmp_path: Path) -> None:
    """The Kubernetes API server is an in-memory emulation (no garbage collector)."""
    assert sarl("submit", str(_write(tmp_path, study_doc("done")))).exit_code == 0
    set_study_status(server, ns, "done", {**RUNNING, "phase": "Succeeded", "succeeded": 4})
    waited = sarl("wait", "done", "--interval", "0.01")
    assert waited.exit_code == 0, waited.stderr
    assert (
        waited.stdout.strip().splitlines()[-1]
        == "study done Succeeded, 4/4 succeeded, 2 running, 1 pending"
    )
    deleted = sarl("delete", "done", "--wait", "--timeout", "5")
    assert deleted.exit_code == 0, deleted.stderr
    assert deleted.stdout.strip() == f"study done deleted from namespace {ns}"
    assert "done" not in server.objects(STUDIES, ns)


def test_submit_wait_reports_a_failed_study(
    sarl: Any, server: KubeServer, ns: str, tmp_path: Path
) -> None:
    """The Kubernetes API server is an in-memory emulation; the Study is pre-created so that
    ``--replace --wait`` finds the Failed status the operator would have written."""
    path = _write(tmp_path, study_doc("broken"))
    assert sarl("submit", str(path)).exit_code == 0
    failed = {
        **RUNNING,
        "phase": "Failed",
        "conditions": [
            {
                "type": "ArmsSucceeded",
                "status": "False",
                "message": "every run of arm(s) high failed",
            }
        ],
    }
    set_study_status(server, ns, "broken", failed)
    result = sarl("submit", str(path), "--replace", "--wait", "--interval", "0.01")
    assert result.exit_code == 1
    assert "error: study broken Failed: every run of arm(s) high failed" in result.stderr
