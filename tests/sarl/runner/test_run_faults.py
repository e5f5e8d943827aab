"""Faults of issue 37 played against a real local run (the CLI ``sarl run --local`` in a child
process, a real MLflow server, the moto S3 server, a real embedding server process):

* two owners: a second ``--resume`` from another workdir sharing the S3 store and MLflow, while
  the first run trains, is refused naming the owner (before: both trained, duplicate points);
* disk full on the tracking spool: one line naming the spool, its free space and how to continue,
  the MLflow run FAILED with the reason (before: a 70-line traceback, the run RUNNING);
* the embedding service dies mid-run: one line naming its URL, the run FAILED, the checkpoint kept
  (before: a 181-line traceback);
* the S3 store answers 500 to the final checkpoint's commit whatever the retries: the run ends 0,
  FINISHED, the checkpoint kept locally and named, and ``--resume`` uploads it (before: exit 1
  after training had finished).

Each ends with a resume and counts the points MLflow holds per step (expected, delivered,
duplicated). The child is the real CLI with two test hooks (``CHILD``): it stalls after logging
the steps in ``STALL_STEPS`` until the parent says go (so faults land at chosen steps, not at a
race), and with ``ENOSPC_AFTER`` set the spool's record write fails with ``ENOSPC`` from then on.
No filesystem can be filled here without root (no tmpfs or loop mount, no FUSE; RLIMIT_FSIZE
gives EFBIG, not ENOSPC), so that write raises the ``OSError(ENOSPC)`` the kernel would return.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

from tests.jobs.outage import Server  # noqa: E402
from tests.sarl.runner.s3_faults import (  # noqa: E402
    CREDENTIALS,
    make_bucket,
    manifest_puts,
    proxies_500,
)
from tests.support.mlflow_server import free_port  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return make_bucket(s3_endpoint)


MAX_STEPS = 8
CHILD = """
import errno, os, sys, time
from pathlib import Path

stalls = {int(s) for s in os.environ.get("STALL_STEPS", "").split(",") if s}
where = Path(os.environ["STALL_DIR"])
enospc_after = int(os.environ.get("ENOSPC_AFTER", "0"))

from sarl.tracking import spool
write = spool.Spool._write
full = False
def filling_write(self, record):
    if full:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    write(self, record)
spool.Spool._write = filling_write

from sarl.runner import callbacks
on_log = callbacks.MetricsCallback.on_log
def hooked_on_log(self, args, state, control, logs=None, **kw):
    global full
    on_log(self, args, state, control, logs=logs, **kw)
    step = state.global_step
    if enospc_after and step == enospc_after and logs and "reward" in logs:
        full = True
    if step in stalls and logs and "reward" in logs:
        stalls.discard(step)
        (where / f"stalled-{step}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 900
        while not (where / f"go-{step}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
callbacks.MetricsCallback.on_log = hooked_on_log

from sarl.cli.main import main
sys.argv = ["sarl", *sys.argv[1:]]
main()
"""


@dataclass
class Child:
    proc: subprocess.Popen[str]
    out: Path
    err: Path

    def wait(self, timeout: float = 900) -> int:
        return self.proc.wait(timeout=timeout)

    @property
    def stderr(self) -> str:
        return self.err.read_text()


@dataclass
class Run:
    spec: Path
    server: Server
    name: str
    stalls: Path
    env: dict[str, str]

    def start(self, workdir: Path, *flags: str, **hooks: str) -> Child:
        env = {**os.environ, **self.env, "SARL_NO_PROGRESS": "1", "STALL_DIR": str(self.stalls)}
        env.update({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "SARL_TRACKING_RETRY_MAX_S": "1"})
        env.update(hooks)
        cmd = [sys.executable, "-c", textwrap.dedent(CHILD), "run", str(self.spec), "--local"]
        cmd += ["--workdir", str(workdir), "--tracking-uri", self.server.url, *flags]
        tag = uuid.uuid4().hex[:6]
        out, err = self.stalls / f"out-{tag}", self.stalls / f"err-{tag}"
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen(cmd, env=env, stdout=o, stderr=e, text=True)
        return Child(proc, out, err)

    def wait_stalled(self, child: Child, step: int) -> None:
        flag = self.stalls / f"stalled-{step}"
        deadline = time.monotonic() + 900  # the module's first run warm-starts the policy
        while not flag.exists():
            assert child.proc.poll() is None, f"ended before step {step}: {child.stderr}"
            assert time.monotonic() < deadline, f"never reached step {step}"
            time.sleep(0.2)

    def go(self, step: int) -> None:
        (self.stalls / f"go-{step}").write_text("")

    def only_run(self) -> Any:
        client = mlflow.MlflowClient(self.server.url)
        experiment = client.get_experiment_by_name(self.name)
        (run,) = client.search_runs([experiment.experiment_id])
        return run

    def points(self, run_id: str, key: str = "reward/mean") -> tuple[int, int, int]:
        """(expected, delivered, duplicated) points of ``key`` over steps 1..MAX_STEPS."""
        steps = [
            m.step for m in mlflow.MlflowClient(self.server.url).get_metric_history(run_id, key)
        ]
        return (
            MAX_STEPS,
            len(set(steps) & set(range(1, MAX_STEPS + 1))),
            len(steps) - len(set(steps)),
        )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "mlflow")
    srv.start()
    yield srv
    srv.stop()


def _run(workdir: Path, server: Server, tmp_path: Path, storage: dict[str, Any],
         reward: list[dict[str, Any]], env: dict[str, str] | None = None) -> Run:  # fmt: skip
    name = f"faults-{uuid.uuid4().hex[:6]}"
    doc = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "preset": "local-grpo-arithmetic",
            "model": {"warm_start": {"steps": 40}},
            "data": {"train_size": 16, "eval_size": 4, "difficulty": 2},
            "algorithm": {
                "rollouts_per_prompt": 2,
                "train_batch_size": 2,
                "mini_batch_size": 2,
                "max_response_length": 48,
                "max_steps": MAX_STEPS,
                "learning_rate": 1e-3,
            },
            "evaluation": {"k": 2, "every_n_steps": 4, "max_problems": 4},
            "tracking": {"log_maps_every_n_steps": 100},
            "storage": {"every_n_steps": 2, **storage},
            "reward": reward,
        },
    }
    spec = workdir / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(doc))
    stalls = tmp_path / "stalls"
    stalls.mkdir()
    return Run(spec, server, name, stalls, env or {})


def _error_line(child: Child) -> str:
    """The one line ``sarl run`` printed for the fault (and no traceback)."""
    text = child.stderr
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, text
    return lines[0]


GROUND_TRUTH = [{"name": "ground_truth", "weight": 1.0}]


def test_a_second_resume_from_another_workdir_is_refused_naming_the_owner(
    workdir: Path, server: Server, tmp_path: Path, s3_endpoint: str, s3_bucket: str,
    policy_cache: Path,
) -> None:  # fmt: skip
    storage = {"checkpoint_uri": f"s3://{s3_bucket}/shared/run", "endpoint_url": s3_endpoint}
    run = _run(workdir, server, tmp_path, storage, GROUND_TRUTH, CREDENTIALS)
    other = tmp_path / "machine-b"  # another workdir: no run directory, no local lock in common
    other.mkdir()
    (other / "cache").symlink_to(policy_cache, target_is_directory=True)

    first = run.start(workdir, STALL_STEPS="3")
    run.wait_stalled(first, 3)  # checkpoint 2 is in the shared store
    second = run.start(other, "--resume")
    code = second.wait()
    run.go(3)
    assert first.wait() == 0, first.stderr

    assert code == 2, second.stderr
    line = _error_line(second) if "error: " in second.stderr else second.stderr.strip()
    assert f"pid {first.proc.pid} on " in line and "last renewed" in line, line
    mlrun = run.only_run()
    assert mlrun.info.status == "FINISHED"
    assert mlrun.data.tags["sarl.owner"].startswith(f"pid {first.proc.pid} on ")
    assert run.points(mlrun.info.run_id) == (MAX_STEPS, MAX_STEPS, 0)
    print(f"\nFAULT two-owners: exit {code}; points {run.points(mlrun.info.run_id)}; {line}")


def test_disk_full_on_the_spool_names_it_and_fails_the_mlflow_run(
    workdir: Path, server: Server, tmp_path: Path
) -> None:
    run = _run(workdir, server, tmp_path, {}, GROUND_TRUTH)
    child = run.start(workdir, ENOSPC_AFTER="3")
    code = child.wait()

    assert code == 1, child.stderr
    line = _error_line(child)
    spool = workdir / "runs" / run.name / "tracking"
    assert f"disk full writing the run's tracking spool at {spool}" in line, line
    assert " free there" in line and "--local --resume" in line
    mlrun = run.only_run()
    assert mlrun.info.status == "FAILED"
    assert "disk full" in mlrun.data.tags["sarl.failure"]

    resumed = run.start(workdir, "--resume")  # space freed
    assert resumed.wait() == 0, resumed.stderr
    mlrun = run.only_run()
    assert mlrun.info.status == "FINISHED"
    assert run.points(mlrun.info.run_id) == (MAX_STEPS, MAX_STEPS, 0)
    print(f"\nFAULT disk-full: exit {code}; points {run.points(mlrun.info.run_id)}; {line}")


def test_the_embedding_service_dying_mid_run_fails_the_run_in_one_line(
    workdir: Path, server: Server, tmp_path: Path
) -> None:
    port = free_port()
    repo = Path(__file__).resolve().parents[3]
    cmd = [sys.executable, "-m", "tests.support.embedding_server", "--port", str(port),
           "--dim", "16"]  # fmt: skip

    def serve() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                import socket

                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return proc
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no embedding server"
                time.sleep(0.2)

    url = f"http://127.0.0.1:{port}"
    structure = {"name": "structure", "weight": 0.5, "settings": {
        "embedder": {"kind": "openai", "url": url, "model": "pseudo", "max_retries": 1,
                     "timeout_s": 5}}}  # fmt: skip
    run = _run(workdir, server, tmp_path, {}, [*GROUND_TRUTH, structure])
    embedder = serve()
    try:
        child = run.start(workdir, STALL_STEPS="3")
        run.wait_stalled(child, 3)  # checkpoint 2 is stored
        os.killpg(embedder.pid, signal.SIGKILL)
        embedder.wait()
        run.go(3)
        code = child.wait()

        assert code == 1, child.stderr
        line = _error_line(child)
        assert url in line and "embedding service" in line and "--resume" in line, line
        mlrun = run.only_run()
        assert mlrun.info.status == "FAILED" and url in mlrun.data.tags["sarl.failure"]
        from sarl.storage import open_store

        latest = open_store(str(workdir / "checkpoints" / run.name)).latest()
        assert latest is not None and latest.step == 2  # the checkpoint is kept

        embedder = serve()
        resumed = run.start(workdir, "--resume")
        assert resumed.wait() == 0, resumed.stderr
    finally:
        if embedder.poll() is None:
            os.killpg(embedder.pid, signal.SIGKILL)
    mlrun = run.only_run()
    assert mlrun.info.status == "FINISHED"
    assert run.points(mlrun.info.run_id) == (MAX_STEPS, MAX_STEPS, 0)
    print(f"\nFAULT embedding-dead: exit {code}; points {run.points(mlrun.info.run_id)}; {line}")


def test_s3_500s_on_the_final_save_keep_the_checkpoint_and_resume_uploads_it(
    workdir: Path, server: Server, tmp_path: Path, s3_endpoint: str, s3_bucket: str
) -> None:
    from sarl.storage import open_store

    store = open_store(f"s3://{s3_bucket}/exp", endpoint_url=s3_endpoint)  # behind no proxy
    with proxies_500(s3_endpoint) as start:
        endpoint, proxy = start(manifest_puts(MAX_STEPS, failures=10**6))
        storage = {"checkpoint_uri": f"s3://{s3_bucket}/exp", "endpoint_url": endpoint}
        run = _run(workdir, server, tmp_path, storage, GROUND_TRUTH, CREDENTIALS)
        child = run.start(workdir)
        code = child.wait()

        assert code == 0, child.stderr
        assert "Traceback" not in child.stderr
        (line,) = [ln for ln in child.stderr.splitlines() if ln.startswith("warning: training")]
        kept = workdir / "runs" / run.name / "trainer" / f"checkpoint-{MAX_STEPS}"
        assert str(kept) in line and "--local --resume" in line, line
        mlrun = run.only_run()
        assert mlrun.info.status == "FINISHED"
        assert run.points(mlrun.info.run_id) == (MAX_STEPS, MAX_STEPS, 0)
        latest = store.latest()
        assert latest is not None and latest.step == MAX_STEPS - 2

        proxy.fail = lambda *_: False  # the store answers again
        resumed = run.start(workdir, "--resume")
        assert resumed.wait() == 0, resumed.stderr
    latest = store.latest()
    assert latest is not None and latest.step == MAX_STEPS
    assert latest.metadata["mlflow_run_id"] == mlrun.info.run_id
    assert run.points(mlrun.info.run_id) == (MAX_STEPS, MAX_STEPS, 0)
    print(f"\nFAULT final-save-500s: exit {code}; points {run.points(mlrun.info.run_id)}; {line}")
