"""A spool's files are not trusted (issue 37 item 5, and item 6's ``acked.tmp-*`` leftovers).

Spools written by hand as a damaged disk, a hostile checkpoint or a killed process would leave
them; sent with ``sarl tracking flush`` to the real MLflow server. A record whose id or path leads
out of the spool is quarantined and nothing outside is deleted or uploaded; one damaged line never
costs the records after it; ``sarl tracking status`` only reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.tracking.spool import Spool
from tests.support.mlflow_server import MlflowServer


@pytest.fixture(autouse=True)
def _no_mlflow_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


@pytest.fixture
def run_id(mlflow_server: MlflowServer, experiment_name: str) -> str:
    client = MlflowClient(mlflow_server.url)
    experiment_id = client.create_experiment(experiment_name)
    return str(client.create_run(experiment_id, run_name="trust").info.run_id)


def _header(root: Path, run_id: str, uri: str) -> None:
    root.mkdir(parents=True)
    doc = {"format": "sarl-tracking-spool", "version": 1, "run_id": run_id, "tracking_uri": uri}
    (root / "spool.json").write_text(json.dumps({**doc, "spool_id": "abc123"}))


def _line(pos: int, kind: str, **body: object) -> str:
    return json.dumps({"pos": pos, "id": f"abc123:{pos}", "kind": kind, **body}) + "\n"


def _metrics(pos: int, step: int) -> str:
    return _line(pos, "metrics", step=step, metrics=[["kl", float(pos), 1000 + pos]])


def _flush(spool: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["tracking", "flush", str(spool), "--timeout", "60"])
    return result.exit_code, result.output


def _steps(url: str, run_id: str) -> list[int]:
    return sorted(m.step for m in MlflowClient(url).get_metric_history(run_id, "kl"))


def _quarantined(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (root / "quarantine.jsonl").open()]


def test_an_artifact_record_cannot_reach_outside_the_spool(
    mlflow_server: MlflowServer, run_id: str, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    (victim / "keep" / "data.txt").write_text("not the spool's")
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    spool = tmp_path / "a" / "b" / "spool"
    _header(spool, run_id, mlflow_server.url)
    hostile = {"pos": 2, "id": "../../../victim", "kind": "artifact", "path": str(secret)}
    (spool / "records.jsonl").write_text(
        _metrics(1, 1) + json.dumps(hostile) + "\n" + _metrics(3, 3)
    )
    code, output = _flush(spool)
    assert code == 3, output
    assert (victim / "keep" / "data.txt").read_text() == "not the spool's"
    assert MlflowClient(mlflow_server.url).list_artifacts(run_id) == []
    assert _steps(mlflow_server.url, run_id) == [1, 3]
    (entry,) = _quarantined(spool)
    assert "id" in str(entry["reason"]) and "victim" in str(entry["line"])


def test_an_artifact_that_is_a_link_is_not_uploaded(
    mlflow_server: MlflowServer, run_id: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    spool = tmp_path / "spool"
    _header(spool, run_id, mlflow_server.url)
    (spool / "artifacts" / "abc123-1").mkdir(parents=True)
    (spool / "artifacts" / "abc123-1" / "map.png").symlink_to(secret)
    (spool / "records.jsonl").write_text(_line(1, "artifact", path="map.png") + _metrics(2, 2))
    code, output = _flush(spool)
    assert code == 3, output
    assert MlflowClient(mlflow_server.url).list_artifacts(run_id) == []
    assert _steps(mlflow_server.url, run_id) == [2]
    assert "is a link" in str(_quarantined(spool)[0]["reason"])
    assert secret.read_text() == "private"


def test_adopting_a_hostile_checkpoint_tail_touches_nothing_outside(tmp_path: Path) -> None:
    """``Spool.adopt`` (``--resume``): ids and paths from the tail never leave either spool."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("keep")
    outside = tmp_path / "outside.txt"
    outside.write_text("private")
    tail = tmp_path / "ckpt" / "tail"
    _header(tail, "run-1", "http://127.0.0.1:9")
    (tail / "artifacts" / "abc123-3").mkdir(parents=True)
    (tail / "artifacts" / "abc123-3" / "f.txt").symlink_to(outside)
    lines = [
        json.dumps({"pos": 1, "id": "../../victim", "kind": "artifact", "path": "data.txt"}),
        json.dumps({"pos": 2, "id": "abc123:2", "kind": "artifact", "path": "../../outside.txt"}),
        _line(3, "artifact", path="f.txt").strip(),
        _metrics(4, 4).strip(),
    ]
    (tail / "records.jsonl").write_text("\n".join(lines) + "\n")
    spool = Spool(tmp_path / "run" / "spool", "run-1", "http://127.0.0.1:9")
    assert spool.adopt(tail) == 1  # only the metrics record
    assert [r.kind for r in spool.pending()] == ["metrics"]
    spool.close()
    assert (victim / "data.txt").read_text() == "keep"
    assert not (tmp_path / "run" / "spool" / "artifacts").exists()
    assert len(_quarantined(tmp_path / "run" / "spool")) == 3


def test_one_damaged_byte_costs_one_record_and_status_only_reads(
    mlflow_server: MlflowServer, run_id: str, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", run_id, mlflow_server.url)
    for step in range(1, 9):
        spool.append("metrics", {"step": step, "metrics": [["kl", float(step), 1000 + step]]})
    spool.close()
    records = tmp_path / "spool" / "records.jsonl"
    lines = records.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"step"', b'"st\xffp"')  # record 3 of 8: one byte changed
    records.write_bytes(b"".join(lines))
    before = records.read_bytes()

    status = CliRunner().invoke(app, ["tracking", "status", str(tmp_path / "spool")])
    assert status.exit_code == 0, status.output
    assert status.output.startswith(f"7 records of run {run_id} waiting")
    assert "1 records damaged" in status.output
    assert records.read_bytes() == before  # reading changed nothing

    code, output = _flush(tmp_path / "spool")
    assert code == 3, output
    assert "7 records sent" in output and "1 damaged" in output
    assert _steps(mlflow_server.url, run_id) == [1, 2, 4, 5, 6, 7, 8]
    (entry,) = _quarantined(tmp_path / "spool")
    assert entry["offset"] == len(b"".join(lines[:2]))


def test_a_step_mlflow_cannot_take_does_not_block_the_next_records(
    mlflow_server: MlflowServer, run_id: str, tmp_path: Path
) -> None:
    """Step 10**30 is no int64 (MLflow's step type): it was retried forever and held back every
    record after it."""
    spool = tmp_path / "spool"
    _header(spool, run_id, mlflow_server.url)
    huge = _line(2, "metrics", step=10**30, metrics=[["kl", 2.0, 1002]])
    (spool / "records.jsonl").write_text(_metrics(1, 1) + huge + _metrics(3, 3))
    code, output = _flush(spool)
    assert code == 3, output
    assert _steps(mlflow_server.url, run_id) == [1, 3]
    assert "int64" in str(_quarantined(spool)[0]["reason"])


def test_the_tracker_refuses_a_step_mlflow_cannot_take(tmp_path: Path) -> None:
    from sarl.tracking.drainer import Drainer
    from sarl.tracking.tracker import Tracker

    tracker = Tracker.__new__(Tracker)  # no MLflow needed: the check comes before spooling
    tracker.spool = Spool(tmp_path / "s", "run-1", "http://127.0.0.1:9")
    tracker._logged = {}
    tracker._drainer = Drainer(tracker.spool, client=None)  # type: ignore[arg-type]  # never started
    with pytest.raises(ValueError, match="int64"):
        tracker.log_metrics({"kl": 1.0}, step=10**30)
    assert tracker.spool.waiting == 0
    tracker.spool.close()


def test_a_write_killed_mid_replace_leaves_no_tmp_file(tmp_path: Path) -> None:
    """A process SIGKILLed inside ``acked``'s atomic replace (after the temp file is written,
    before the rename) leaves ``acked.tmp-*``; the next writer removes it, a reader does not."""
    root = tmp_path / "spool"
    spool = Spool(root, "run-1", "http://127.0.0.1:9")
    spool.append("metrics", {"step": 1, "metrics": [["kl", 1.0, 1001]]})
    spool.close()
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from sarl.tracking.spool import Spool\n"
        "spool = Spool(Path(sys.argv[1]), 'run-1', 'http://127.0.0.1:9')\n"
        "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)\n"
        "spool.ack(1)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(root)], check=False)
    assert done.returncode == -9
    assert list(root.glob("acked.tmp-*"))  # what the kill left

    status = CliRunner().invoke(app, ["tracking", "status", str(root)])
    assert status.exit_code == 0 and list(root.glob("acked.tmp-*"))  # reading removes nothing
    again = Spool.open_existing(root)
    assert not list(root.glob("*.tmp-*"))
    assert again.waiting == 1  # the ack never happened
    again.close()
    assert os.listdir(root)
