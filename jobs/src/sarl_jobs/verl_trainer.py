"""verl 0.9.1 training job: one Experiment, FSDP2 actor/ref/critic, vLLM rollouts, Ray.

Run inside a Kubeflow PyTorchJob (one pod per node, every pod runs the same command)::

    python -m sarl_jobs.verl_trainer /etc/sarl/experiment.yaml

or ``from sarl_jobs.verl_trainer import main; main("experiment.yaml")``. Needs the ``[verl]``
extra (``pip install -e jobs[verl]``) and GPUs. ``--dry-run`` prints this pod's plan as JSON
(:func:`plan`: role, nodes, GPUs per node, the Ray command, verl's overrides) and runs nothing —
``kubectl exec`` it in a pod of a PyTorchJob to see what that pod would do.

* Node 0 (``PET_NODE_RANK`` from the PyTorchJob, see :mod:`sarl_jobs.cluster`) starts the Ray
  head, waits until ``PET_NNODES`` Ray nodes joined, writes the task's train/eval prompts as
  verl parquet files, builds the built-in model if the spec names it, composes verl's
  ``ppo_trainer.yaml`` with :func:`sarl.integrations.verl.config.verl_overrides` and runs verl's
  ``main_ppo.main`` (the driver).
* Other nodes wait until the head's Ray port answers (:func:`sarl_jobs.cluster.wait_for_head`:
  its name resolves before its container runs), then join with ``ray start
  --address=$MASTER_ADDR:6379 --block``. When the driver has
  finished, the head leaves a marker file (:data:`DONE_MARKER` in the workdir) on every node
  before it stops Ray; a worker exits 0 only when it finds that marker. When its Ray node ends
  without it (the head was lost or restarted, the raylet died, joining failed) the worker exits
  1 (:class:`RayNodeLost`), so ``restartPolicy: OnFailure`` restarts it and it joins the new
  head, which waits for all ``PET_NNODES`` nodes again.
* Resume: before the driver starts, :func:`sarl_jobs.resume.restore_verl` puts the store's
  newest complete checkpoint into ``trainer.default_local_dir`` (verl resumes from it), so a
  restarted pod or a re-created Experiment continues where the last upload left off. Multi-node:
  once every node joined, the head has each node download only the shards of the ranks verl
  will place on it (:mod:`sarl_jobs.node_restore`).
* Checkpoints: verl saves every ``storage.every_n_steps`` under ``trainer.default_local_dir``;
  :class:`sarl_jobs.checkpoints.StoreCheckpointCallback` (verl's post-save hook) pushes each one
  to ``storage.checkpoint_uri`` with :func:`sarl.storage.open_store` (multi-node: every node's
  part, under one manifest) and prunes to ``keep_last``.
* Tracking (the driver, node 0): sarl's spooling :class:`sarl.tracking.tracker.Tracker`, not
  verl's MLflow logger, so an MLflow outage of any length neither stops training nor drops a
  metric (:mod:`sarl_jobs.verl_tracking`). The run is ``MLFLOW_RUN_ID`` (created by the operator;
  without it a new run of ``tracking.experiment_name`` is started) at ``MLFLOW_TRACKING_URI`` (or
  ``tracking.mlflow_uri``; with neither, nothing is tracked). verl logs with
  ``trainer.logger=[console,file]`` to ``<workdir>/tracking/metrics.jsonl``; a thread of the
  driver follows that file and spools every step's numbers (under the names verl's MLflow logger
  gave them) in ``<workdir>/tracking/spool/<run id>``, sent in the background. Each uploaded
  checkpoint carries the unsent records of the steps before its own (``sarl-tracking-spool/``:
  verl saves step N before it logs it), and a resumed job adopts them from the checkpoint it
  restores. At the end the driver waits up to ``SARL_TRACKING_FINISH_WAIT_S`` for the drain and
  prints how many records are still spooled.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from sarl.integrations.verl.config import verl_overrides
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_experiment
from sarl.spec.model_source import loader_path, parse_model_uri
from sarl_jobs.cli import config_of, job_parser, plan_or_run
from sarl_jobs.cluster import (
    RAY_PORT,
    ClusterEnv,
    HeadUnreachable,
    head_wait_s,
    ray_auth_env,
    ray_start_command,
    wait_for_head,
)
from sarl_jobs.data import problems, verl_rows
from sarl_jobs.node_restore import restore_on_nodes, wait_for_nodes
from sarl_jobs.resume import StoreSettings, restore_verl
from sarl_jobs.verl_tracking import metrics_file, open_tracking, tracking_uri

logger = logging.getLogger(__name__)
#: Left in the workdir of every node by the head once the driver succeeded (see the docstring).
DONE_MARKER: Final = "ray-job-finished"
#: ``$TMPDIR/sarl-verl`` (``/mnt/scratch/sarl-verl`` in an operator pod, on its scratch volume):
#: data, built model, local checkpoints.
DEFAULT_WORKDIR: Final = str(Path(tempfile.gettempdir()) / "sarl-verl")
#: Shown in a dry-run plan where the built-in model's directory will be (built at start).
BUILTIN_MODEL_PLACEHOLDER: Final = "<built-in model, built at start under {root}/cache>"


def plan(
    exp: Experiment, environ: Mapping[str, str], *, workdir: str | Path = DEFAULT_WORKDIR
) -> dict[str, Any]:
    """What this pod will do, as plain data (printed by ``--dry-run``, followed by :func:`main`).

    ``role`` is ``head`` (node 0: Ray head, waits for ``nnodes`` Ray nodes, then the verl
    driver with ``verl_overrides``) or ``worker`` (joins the head and blocks). One node: verl
    starts its own local Ray (``ray`` is null). Raises ValueError naming the variable or field
    when the PyTorchJob's environment and the spec disagree.
    """
    env = ClusterEnv.from_env(environ)
    env.check_layout(nodes=exp.spec.resources.nodes)
    gpus = exp.spec.resources.gpus_per_node
    root = Path(workdir)
    out: dict[str, Any] = {
        "backend": "verl",
        "experiment": exp.name,
        "role": "head" if env.is_head else "worker",
        "node_rank": env.node_rank,
        "nnodes": env.nnodes,
        "n_gpus_per_node": gpus,
        "master": f"{env.master_addr}:{env.master_port}",
        "ray": None,
    }
    if env.nnodes > 1:
        out["ray"] = {
            "start": ray_start_command(env, num_gpus=gpus),
            "wait_for_nodes": env.nnodes if env.is_head else None,
            # A worker's wait for the head's port; the head waits as long for the workers.
            "wait_for_head": None if env.is_head else f"{env.master_addr}:{RAY_PORT}",
            "wait_s": head_wait_s(environ),
        }
    if not env.is_head:
        return out
    store = StoreSettings.resolve(exp, environ)
    data = root / "data"
    model_path = None
    if exp.spec.model.is_builtin:
        model_path = BUILTIN_MODEL_PLACEHOLDER.format(root=root)
    else:  # a Hub id, or where an s3:// or pvc:// policy will be on this pod's disk
        model_path = loader_path(parse_model_uri(exp.spec.model.name, "spec.model.name"), root)
    out["checkpoint"] = {"uri": store.uri, "local_dir": str(root / "checkpoints")}
    out["verl_overrides"] = verl_overrides(
        exp,
        train_files=str(data / "train.parquet"),
        val_files=str(data / "val.parquet"),
        n_gpus_per_node=gpus,
        nnodes=env.nnodes,
        model_path=model_path,
        checkpoint_uri=store.uri,
        checkpoint_dir=str(root / "checkpoints"),
        endpoint_url=store.endpoint_url,
        metrics_file=str(metrics_file(root)) if tracking_uri(exp, environ) else None,
    )
    return out


def main(cfg_path: str | Path, *, workdir: str | Path = DEFAULT_WORKDIR) -> None:
    """Run the Experiment at ``cfg_path`` with verl; see the module docstring."""
    exp = load_experiment(Path(cfg_path))
    # Ray's token authentication for every Ray process this pod starts or connects with.
    os.environ.update(ray_auth_env(os.environ))
    steps = plan(exp, os.environ, workdir=workdir)
    env = ClusterEnv.from_env(os.environ)
    ray = steps["ray"]
    root = Path(workdir)
    store = StoreSettings.resolve(exp, os.environ)
    if not env.is_head:
        # The head's name resolves before its Ray port answers: a `ray start` now would fail
        # and count as a restart. The head has this node download its shards once it joined.
        wait_for_head(env.master_addr, RAY_PORT, timeout_s=ray["wait_s"])
        if not exp.spec.model.is_builtin:  # this node's ranks load the policy from its disk
            _model_path(exp, root)
        run_worker(ray["start"], root / DONE_MARKER, node_rank=env.node_rank)
        return
    if ray is None:  # one node: verl's run_ppo starts a local Ray itself
        _drive(exp, env, root, restore_verl(store, root / "checkpoints"))
        return
    subprocess.run(ray["start"], check=True)
    try:
        step = _join_and_restore(env.nnodes, store, root / "checkpoints", ray["wait_s"])
        _drive(exp, env, root, step)
        _release_workers(root / DONE_MARKER)
    finally:
        subprocess.run(["ray", "stop"], check=False)  # lets the workers' `ray start --block` end


class RayNodeLost(RuntimeError):
    """A worker's Ray node ended before the head finished the job."""


def run_worker(command: list[str], done: Path, *, node_rank: int, poll_s: float = 1.0) -> None:
    """Run ``command`` (``ray start --block``) until the head leaves ``done`` (return) or the
    Ray node ends without it (:class:`RayNodeLost`: the pod must exit non-zero to be
    restarted)."""
    done.parent.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)  # an earlier container's, where the workdir is a volume
    proc = subprocess.Popen(command)
    try:
        while (code := proc.poll()) is None and not done.exists():
            time.sleep(poll_s)
    finally:
        if proc.poll() is None:  # finished: the container's end takes the raylet with it
            proc.terminate()
            proc.wait()
    if done.exists():
        logger.info("Ray worker on node %d: the head finished the job", node_rank)
        return
    raise RayNodeLost(
        f"Ray node {node_rank}: `{' '.join(command[:2])}` exited with {code} before the head "
        "finished the job (head lost or restarted, or the raylet died); exiting 1 so the "
        "PyTorchJob restarts this pod and it joins the head again"
    )


def _release_workers(done: Path) -> None:
    """Leave ``done`` on every live Ray node (best effort: a worker that misses it exits 1
    after the job has already succeeded, which no longer matters)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address="auto", ignore_reinit_error=True)
    try:
        touch = ray.remote(num_cpus=0, max_retries=0)(_touch)
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        strategies = [NodeAffinitySchedulingStrategy(node, soft=False) for node in nodes]
        ray.get([touch.options(scheduling_strategy=s).remote(str(done)) for s in strategies])
    except Exception as e:  # a worker that saw its marker may already be gone
        logger.warning("not every Ray worker got the end-of-job marker: %s", e)
    finally:
        ray.shutdown()


def _touch(path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).touch()


def _drive(exp: Experiment, env: ClusterEnv, root: Path, step: int | None) -> None:
    """The driver on node 0, the checkpoint of ``step`` (None: none) restored: prompts and
    model on local disk, the run's tracking, then verl's ``main_ppo``."""
    gpus = exp.spec.resources.gpus_per_node
    train_files, val_files = write_parquet(exp, root / "data")
    store = StoreSettings.resolve(exp, os.environ)
    checkpoint_dir = root / "checkpoints"
    overrides = verl_overrides(
        exp,
        train_files=str(train_files),
        val_files=str(val_files),
        n_gpus_per_node=gpus,
        nnodes=env.nnodes,
        model_path=_model_path(exp, root),
        checkpoint_uri=store.uri,
        checkpoint_dir=str(checkpoint_dir),
        endpoint_url=store.endpoint_url,
        metrics_file=str(metrics_file(root)) if tracking_uri(exp, os.environ) else None,
    )
    resumed_from = checkpoint_dir / f"global_step_{step}" if step is not None else None
    tracking = open_tracking(exp, root, os.environ, resumed_from=resumed_from)
    if tracking is None:
        run_verl(overrides)
        return
    with tracking:  # FINISHED, or FAILED/KILLED after an error (a short wait for the drain)
        run_verl(overrides)


def run_verl(overrides: list[str]) -> None:
    """verl's own ``main_ppo`` with ``ppo_trainer.yaml`` composed with ``overrides``."""
    from hydra import compose, initialize_config_dir
    from verl.trainer import main_ppo

    config_dir = Path(main_ppo.__file__).parent / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    main_ppo.main(config)  # hydra.main passes an explicit config straight to the task function


def write_parquet(exp: Experiment, out_dir: Path) -> tuple[Path, Path]:
    """The train and eval prompts as verl parquet files in ``out_dir``."""
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    train, evals = problems(exp)
    paths = out_dir / "train.parquet", out_dir / "val.parquet"
    for path, items, split in zip(paths, (train, evals), ("train", "test"), strict=True):
        pd.DataFrame(verl_rows(exp, items, split)).to_parquet(path)
    return paths


def _model_path(exp: Experiment, root: Path) -> str:
    """The policy's path for verl: the built-in model built here, an s3:// model downloaded
    under ``root/models`` (once per pod; :func:`sarl.storage.models.materialize`), a pvc://
    model where the operator mounted it, or the Hub id."""
    if not exp.spec.model.is_builtin:
        from sarl.storage.models import materialize

        endpoint = exp.spec.storage.endpoint_url  # else AWS_ENDPOINT_URL, as the checkpoints
        return materialize(exp.spec.model.name, root, endpoint_url=endpoint)
    from sarl.runner.tiny import prepare_tiny_policy

    spec = exp.spec
    path = prepare_tiny_policy(
        spec.data,
        spec.model,
        cache_dir=root / "cache",
        max_response_tokens=spec.algorithm.max_response_length,
    )
    return str(path)


def _join_and_restore(
    nnodes: int, store: StoreSettings, checkpoint_dir: Path, wait_s: float
) -> int | None:
    """The head, its Ray up: wait until ``nnodes`` nodes joined, then restore the checkpoint on
    each (:mod:`sarl_jobs.node_restore`); the step verl resumes from."""
    import ray

    ray.init(address="auto")
    try:
        nodes = wait_for_nodes(nnodes, wait_s)
        return restore_on_nodes(store, checkpoint_dir, nodes, nnodes)
    finally:
        ray.shutdown()  # verl's run_ppo initialises Ray itself


def _cli(argv: list[str]) -> int:
    parser = job_parser(
        "sarl_jobs.verl_trainer", "verl", "role, nodes, GPUs, Ray command, verl overrides"
    )
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR, help="local data, model, checkpoints")
    args = parser.parse_args(argv)
    config = config_of(parser, args)
    logging.basicConfig(level=logging.INFO)
    # Where verl configured logging first (imported before this), basicConfig does nothing:
    # the waits for the head, the nodes and the downloads must still be in the pod's log.
    logging.getLogger("sarl_jobs").setLevel(logging.INFO)
    try:
        return plan_or_run(
            args.dry_run,
            lambda: plan(load_experiment(Path(config)), os.environ, workdir=args.workdir),
            lambda: main(config, workdir=args.workdir),
        )
    except (RayNodeLost, HeadUnreachable) as e:  # expected: one line, exit 1 (a restart)
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
