"""A local run inside a real Jupyter kernel, as a notebook user drives it: a reward defined in the
notebook itself next to the structure reward's spawn process pool, the kernel interrupted
mid-training, then the same kernel running again.

After the interrupt the MLflow run is ``KILLED`` (not left ``RUNNING``), none of the run's
worker processes is left, and the kernel trains again: the reward defined in ``__main__`` scores
next to the structure reward, whose pool (2 workers, 64 completions a step) clusters in spawned
processes. A Study that would run that reward in parallel processes is refused with a message
saying what to do. Nothing is timed: every wait is for a state, with a generous bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import mlflow
import psutil
import pytest

from tests.examples.kernel import Kernel, kernel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

NAME = "nb-interrupt"  # the Experiment's name in SETUP
SETUP = """
import signal

import sarl
from pydantic import BaseModel
from sarl.rewards.base import PerSampleReward, RewardOutput
from sarl.rewards.registry import register_reward


class BrevitySettings(BaseModel):
    limit: int = 200


@register_reward
class Brevity(PerSampleReward):
    '''Defined in the notebook (module __main__): 1 for a response under `limit` characters.'''

    name = "brevity"
    Settings = BrevitySettings

    def score_sample(self, sample, where):
        return RewardOutput(float(len(sample.response) < self.settings.limit))


def spec(max_steps):
    return {"metadata": {"name": "nb-interrupt"}, "spec": {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 20}},
        "data": {"train_size": 64, "eval_size": 2, "difficulty": 1},
        # 8 prompts x 8 rollouts = 64 completions a step: the structure reward clusters them in
        # its spawn process pool (it stays in-process below 64).
        "algorithm": {"rollouts_per_prompt": 8, "train_batch_size": 8, "mini_batch_size": 8,
                      "max_response_length": 24, "max_steps": max_steps},
        "evaluation": {"k": 1, "every_n_steps": 1000, "max_problems": 2},
        "tracking": {"log_maps_every_n_steps": 1000},
        "storage": {"every_n_steps": 1},
        "reward": [
            {"name": "structure", "settings": {"clustering": "kmeans", "workers": 2,
                                               "embedder": {"kind": "local"}}},
            {"name": "brevity", "weight": 0.5},
        ],
    }}


client = sarl.Client.local(workdir=".sarl", progress=False)
"""


def _workers(pid: int) -> list[psutil.Process]:
    """Live processes the kernel spawned for a run (``spawn_main``): the structure reward's pool.

    Multiprocessing's resource tracker is not one: it is started with the first spawned process
    and serves the kernel until it exits, whatever runs.
    """
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != "zombie":
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _wait_for(what: str, check: Callable[[], bool], bound_s: float = 900) -> None:
    deadline = time.monotonic() + bound_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting, after {bound_s:.0f} s, for {what}")
        time.sleep(1)


def _runs(uri: str) -> list[mlflow.entities.Run]:
    client = mlflow.MlflowClient(uri)
    experiments = client.search_experiments()
    if not experiments:
        return []
    return list(
        client.search_runs(
            [e.experiment_id for e in experiments], order_by=["attributes.start_time ASC"]
        )
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, Path, str]]:
    cwd = tmp_path_factory.mktemp("kernel")
    with kernel(cwd) as k:
        reply = k.execute(SETUP)
        assert reply.status == "ok", reply.evalue
        yield k, cwd, f"sqlite:///{cwd / '.sarl' / 'mlflow.db'}"


@pytest.fixture(scope="module")
def interrupted(session: tuple[Kernel, Path, str]) -> tuple[str, list[int]]:
    """Start a long run, interrupt the kernel once a training step was logged and the pool's
    workers are up; returns the run id and the worker pids seen before the interrupt."""
    k, cwd, uri = session
    cell = k.submit("result = client.run(spec(500))")
    # Written once the run's MLflow run exists: reading the store before could race the kernel
    # creating its tables.
    marker = cwd / ".sarl" / "runs" / NAME / "run.json"

    def trained_a_step() -> bool:
        if k.finished(cell):
            raise AssertionError(f"the run ended before the interrupt: {k.collect(cell)}")
        runs = _runs(uri) if marker.exists() else []
        if not runs:
            return False
        history = mlflow.MlflowClient(uri).get_metric_history(runs[0].info.run_id, "reward/mean")
        return bool(history) and len(_workers(k.pid)) >= 2

    _wait_for("a logged training step and the structure reward's workers", trained_a_step)
    workers = [p.pid for p in _workers(k.pid)]
    k.interrupt()  # the notebook's "interrupt" button: SIGINT to the kernel's process group
    reply = k.collect(cell)
    assert (reply.status, reply.ename) == ("error", "KeyboardInterrupt")
    return _runs(uri)[0].info.run_id, workers


def test_the_interrupted_run_is_killed_not_running(
    session: tuple[Kernel, Path, str], interrupted: tuple[str, list[int]]
) -> None:
    _, _, uri = session
    run_id, _ = interrupted
    assert mlflow.MlflowClient(uri).get_run(run_id).info.status == "KILLED"


def test_no_worker_process_is_left(
    session: tuple[Kernel, Path, str], interrupted: tuple[str, list[int]]
) -> None:
    k, _, _ = session
    _, workers = interrupted
    assert len(workers) >= 2  # there were workers to stop
    _wait_for("the run's workers to exit", lambda: not _workers(k.pid), bound_s=120)
    assert not [pid for pid in workers if psutil.pid_exists(pid) and _alive(pid)]


def test_the_same_kernel_runs_again_with_the_notebook_reward(
    session: tuple[Kernel, Path, str], interrupted: tuple[str, list[int]]
) -> None:
    k, _, uri = session
    killed, _ = interrupted
    reply = k.execute(
        "result = client.run(spec(2))\n"
        "print(result.steps, result.final_metrics['reward/brevity'])\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    assert reply.status == "ok", (reply.ename, reply.evalue, reply.stderr[-3000:])
    # A front end shows stderr as a red box: a run that goes well writes none (issue 40 item 5).
    assert reply.stderr == "", reply.stderr[-3000:]
    steps, brevity = reply.stdout.splitlines()[0].split()
    assert steps == "2" and 0.0 <= float(brevity) <= 1.0
    assert reply.stdout.splitlines()[1] == "True"  # the kernel's Ctrl-C handling is back
    runs = {r.info.run_id: r for r in _runs(uri)}
    assert runs[killed].info.status == "KILLED"
    (again,) = [r for r in runs.values() if r.info.run_id != killed]
    assert again.info.status == "FINISHED"
    assert {"structure/score", "reward/brevity"} <= set(again.data.metrics)
    assert not _workers(k.pid)  # the pool ended with the run


def test_a_parallel_study_with_the_notebook_reward_is_refused(
    session: tuple[Kernel, Path, str], interrupted: tuple[str, list[int]]
) -> None:
    k, cwd, _ = session
    reply = k.execute(
        "study = {'apiVersion': 'sarl.dev/v1alpha1', 'kind': 'Study', 'metadata': {'name': 's'},"
        " 'spec': {'base': spec(2)['spec'], 'arms': [{'name': 'a'}], 'seeds': [0, 1]}}\n"
        "client.study(study, jobs=2)"
    )
    assert (reply.status, reply.ename) == ("error", "PreflightError")
    assert reply.evalue.startswith("reward 'brevity' is defined in __main__")
    assert "jobs=1" in reply.evalue
    assert not (cwd / ".sarl" / "checkpoints" / "s").exists()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
