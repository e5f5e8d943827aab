"""TRL 1.x training job: GRPO or RLOO with accelerate FSDP2, one process per GPU (torchrun).

Run inside a Kubeflow PyTorchJob (one pod per node, every pod runs the same command)::

    python -m sarl_jobs.trl_trainer /etc/sarl/experiment.yaml

or ``from sarl_jobs.trl_trainer import main; main("experiment.yaml")``. Needs the ``[trl]`` extra
(``pip install -e jobs[trl]``). ``main`` writes accelerate's FSDP2 config
(:func:`sarl.integrations.trl_cluster.accelerate_config`) to a YAML file and runs
``accelerate launch`` (torchrun underneath) with this pod's node rank, node count
(``PET_NODE_RANK``, ``PET_NNODES``, see :mod:`sarl_jobs.cluster`), ``MASTER_ADDR`` and
``MASTER_PORT`` from the PyTorchJob; every launched process calls :func:`train`. On CPU-only
nodes (``resources.gpus_per_node: 0``) it runs ``torch.distributed.run`` instead, one process per
node, and trains with DDP over gloo: FSDP2 shards with ``reduce_scatter``, which gloo does not
implement, and ``accelerate launch`` on CPUs uses its simple launcher, which spans machines only
through MPI (``--mpirun_hostfile``); torchrun is what ``accelerate launch`` starts underneath on
GPUs, and the processes it starts are the same :func:`train` (accelerate's MULTI_CPU state,
``ACCELERATE_USE_CPU``). The CPU path is what the multi-node tests run (no GPU here); the GPU path
differs in the launcher and the FSDP2 config only. ``--dry-run`` prints the plan (:func:`plan`)
as JSON and runs nothing.

The spec -> ``GRPOConfig``/``RLOOConfig`` mapping is ``sarl.runner.trl_config.training_args``
(the local runner's), with the cluster's batch layout on top
(:func:`sarl.integrations.trl_cluster.cluster_overrides`); the rewards are
``sarl.integrations.trl.make_trl_reward``. Generation: vLLM colocated on each process's GPU
where the node has CUDA and the image has vLLM, unless ``spec.resources.trl_vllm`` is false,
else transformers' ``generate``; each process decides (:func:`training_arguments`) and the main
one logs which and why. PPO needs a critic and is refused: run it with
:mod:`sarl_jobs.verl_trainer`. Checkpoints: TRL saves every ``storage.every_n_steps``
(full state dict, gathered on rank 0), and rank 0 pushes each ``checkpoint-N`` directory to
``storage.checkpoint_uri`` (or the operator's ``SARL_CHECKPOINT_URI``); at start the newest
complete one is restored from there (:mod:`sarl_jobs.resume`) and training resumes from it.
Tracking (global rank 0): sarl's spooling :class:`sarl.tracking.tracker.Tracker`, not
transformers' MLflow callback (``report_to`` is ``none``), so an MLflow outage of any length
neither stops training nor drops a metric. The run is ``MLFLOW_RUN_ID`` (created by the operator;
without it a new run of ``tracking.experiment_name`` is started) at ``MLFLOW_TRACKING_URI`` (or
``tracking.mlflow_uri``; with neither, nothing is tracked). Every value TRL logs goes under its
TRL name, at the optimizer step, into the spool on the job's scratch
(``$TMPDIR/sarl-tracking/<run id>``) and is sent in the background; each uploaded checkpoint
carries the unsent records (``sarl-tracking-spool/``), and a resumed job adopts them from the
checkpoint it restores. At the end the job waits up to ``SARL_TRACKING_FINISH_WAIT_S`` for the
drain, prints how many records are still spooled, and exits 0.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sarl.integrations.trl_cluster import (
    accelerate_config,
    check_supported,
    cluster_overrides,
    generation_overrides,
    processes_per_node,
)
from sarl.runner.tied_weights import quiet_tied_missing_keys
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_experiment
from sarl.tracking.spool import IN_CHECKPOINT
from sarl_jobs.cli import config_of, job_parser, plan_or_run
from sarl_jobs.cluster import ClusterEnv
from sarl_jobs.resume import StoreSettings, local_trl_checkpoint, restore_trl

if TYPE_CHECKING:  # the tracker imports the MLflow client's dependencies
    from sarl.tracking.tracker import Tracker

#: Stands for the accelerate config file in a dry-run plan (written to a temp dir at start).
ACCELERATE_CONFIG_PLACEHOLDER: Final = "<accelerate.yaml>"
# Characters MLflow refuses in a metric name, replaced as transformers' MLflow callback does.
_METRIC_NAME: Final = re.compile(r"[^0-9A-Za-z_\-\.\ :/]")


def plan(exp: Experiment, environ: Mapping[str, str], cfg_path: str | Path) -> dict[str, Any]:
    """What this pod will do, as plain data (printed by ``--dry-run``, followed by :func:`main`).

    GPU nodes: ``accelerate launch`` with FSDP2 (``accelerate_config``), one process per GPU.
    CPU-only nodes (``gpus_per_node: 0``): ``torch.distributed.run`` with one process per node,
    DDP over gloo (accelerate's MULTI_CPU; FSDP2 needs ``reduce_scatter``, which gloo lacks).
    ``command`` holds :data:`ACCELERATE_CONFIG_PLACEHOLDER` where the config file goes. Raises
    ValueError naming the variable or field when the pod's environment and the spec disagree.
    """
    check_supported(exp)
    env = ClusterEnv.from_env(environ)
    env.check_layout(nodes=exp.spec.resources.nodes)
    per_node = processes_per_node(exp)
    cpu = exp.spec.resources.gpus_per_node == 0
    worker = ["-m", "sarl_jobs.trl_trainer", "--worker", str(cfg_path)]
    out: dict[str, Any] = {
        "backend": "trl",
        "experiment": exp.name,
        "role": "main" if env.is_head else "worker",
        "node_rank": env.node_rank,
        "nnodes": env.nnodes,
        "processes_per_node": per_node,
        "device": "cpu" if cpu else "gpu",
        "master": f"{env.master_addr}:{env.master_port}",
    }
    if cpu:
        out["launcher"] = "torchrun"
        out["accelerate_config"] = None
        out["command"] = [
            sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={env.nnodes}", f"--nproc_per_node={per_node}",
            f"--node_rank={env.node_rank}",
            f"--master_addr={env.master_addr}", f"--master_port={env.master_port}",
            *worker,
        ]  # fmt: skip
    else:
        out["launcher"] = "accelerate"
        out["accelerate_config"] = accelerate_config(exp)
        out["command"] = [
            sys.executable, "-m", "accelerate.commands.launch",
            "--config_file", ACCELERATE_CONFIG_PLACEHOLDER,
            "--num_machines", str(env.nnodes),
            "--num_processes", str(env.nnodes * per_node),
            "--machine_rank", str(env.node_rank),
            "--main_process_ip", env.master_addr,
            "--main_process_port", str(env.master_port),
            *worker,
        ]  # fmt: skip
    out["training_args"] = cluster_overrides(exp, env.nnodes * per_node)
    return out


def main(cfg_path: str | Path) -> None:
    """Launch :func:`train` on this pod's GPUs (or CPU); see the module docstring."""
    import yaml

    exp = load_experiment(Path(cfg_path))
    steps = plan(exp, os.environ, cfg_path)
    command = list(steps["command"])
    child_env = dict(os.environ)
    if steps["accelerate_config"] is not None:
        config_file = Path(tempfile.mkdtemp(prefix="sarl-accelerate-")) / "accelerate.yaml"
        config_file.write_text(yaml.safe_dump(steps["accelerate_config"]), encoding="utf-8")
        command[command.index(ACCELERATE_CONFIG_PLACEHOLDER)] = str(config_file)
    else:
        child_env["ACCELERATE_USE_CPU"] = "true"  # accelerate's MULTI_CPU: gloo
    subprocess.run(command, check=True, env=child_env)


def train(cfg_path: str | Path, *, output_dir: str | Path | None = None) -> None:
    """One training process (started by the launcher): build the trainer and train.

    ``output_dir`` defaults to ``$TMPDIR/sarl-trl`` (``/mnt/scratch/sarl-trl`` in an operator pod:
    its scratch volume, which a re-created pod does not keep) — the store is what survives."""
    output_dir = Path(output_dir) if output_dir else Path(tempfile.gettempdir()) / "sarl-trl"
    from accelerate import PartialState
    from datasets import Dataset

    from sarl.integrations.trl import bind_trainer, make_trl_reward
    from sarl.runner.trl_config import trainer_classes, training_args
    from sarl_jobs.data import problems

    exp = load_experiment(Path(cfg_path))
    check_supported(exp)
    spec = exp.spec
    # Before torch.distributed starts: from then on transformers' save_pretrained writes only on
    # global rank 0, and the built-in model of every other node would lack its weights.
    model_path = _model_path(exp, Path(output_dir))
    state = PartialState()
    train_problems, _ = problems(exp)
    dataset = Dataset.from_dict(
        {
            "prompt": [
                spec.data.prompt_template.format(question=p.question) for p in train_problems
            ],
            "ground_truth": [p.answer for p in train_problems],
        }
    )
    rewards = [
        make_trl_reward(t.name, t.settings, num_generations=spec.algorithm.rollouts_per_prompt)
        for t in spec.reward
    ]
    config_cls, trainer_cls = trainer_classes(spec.algorithm.name)
    weights = [t.weight for t in spec.reward]
    local = training_args(config_cls, exp, Path(output_dir), weights, progress=False)
    args, generation = training_arguments(
        local, exp, state.num_processes, cuda=_cuda(), vllm=_vllm_installed()
    )
    if state.is_main_process:
        print(f"sarl: {generation}", flush=True)
    trainer = trainer_cls(
        model=model_path,
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
    )
    bind_trainer(rewards, trainer)  # the policy (embedder.kind 'policy') and its stop token ids
    store = StoreSettings.resolve(exp, os.environ)
    # Every node needs the files; one process per node downloads, the others wait for it. With
    # several nodes the store's checkpoint wins over a local one (on the scratch volume, which
    # outlives a container restart: another node's holds only its RNG states, or half a save).
    resume_from = None
    if state.is_local_main_process:
        nnodes = ClusterEnv.from_env(os.environ).nnodes
        resume_from = restore_trl(store, Path(output_dir), local_wins=nnodes == 1)
    state.wait_for_everyone()
    if resume_from is None:
        resume_from = local_trl_checkpoint(Path(output_dir))
    tracker = _open_tracker(exp, resume_from) if state.is_main_process else None
    trainer.add_callback(_upload_callback(store, tracker))
    if tracker is None:
        _train(trainer, resume_from)
        return
    trainer.add_callback(_tracking_callback(tracker))
    with tracker:  # FINISHED, or FAILED/KILLED after an error (a short wait for the drain)
        _train(trainer, resume_from)
    print(tracker.closing_line(), flush=True)


def training_arguments(
    local: Any, exp: Experiment, num_processes: int, *, cuda: bool, vllm: bool
) -> tuple[Any, str]:
    """The local mapping's ``GRPOConfig``/``RLOOConfig`` ``local`` with the cluster's batch
    layout and generation engine (vLLM colocate where ``cuda`` and ``vllm``, see
    :func:`sarl.integrations.trl_cluster.generation_overrides`); and the line saying which
    engine and why."""
    generation, why = generation_overrides(exp, cuda=cuda, vllm=vllm)
    overrides = {**cluster_overrides(exp, num_processes), **generation}
    return dataclasses.replace(local, **_known_fields(local, overrides)), why


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _vllm_installed() -> bool:
    """Whether the image has vLLM; found, not imported (TRL imports it when it builds the
    engine)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _known_fields(args: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` for ``dataclasses.replace(args, ...)``; ``gradient_checkpointing`` also as
    ``activation_checkpointing`` where transformers has that name (5.2x), which otherwise wins
    over the old one in ``TrainingArguments.__post_init__``."""
    names = {f.name for f in dataclasses.fields(args)}
    if "gradient_checkpointing" in overrides and "activation_checkpointing" in names:
        overrides = {**overrides, "activation_checkpointing": overrides["gradient_checkpointing"]}
    return overrides


def _train(trainer: Any, resume_from: Path | None) -> None:
    with quiet_tied_missing_keys(trainer.model):  # tied lm_head: not in the checkpoint, by design
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)


def _open_tracker(exp: Experiment, resume_from: Path | None) -> Tracker | None:
    """The job's run (``MLFLOW_RUN_ID``, else a new one) with its spool on scratch, adopting the
    unsent records ``resume_from`` carries; ``None`` when no tracking URI is set."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or exp.spec.tracking.mlflow_uri
    if not uri:
        return None
    from sarl.tracking.tracker import Tracker

    spools = Path(tempfile.gettempdir()) / "sarl-tracking"
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if run_id:
        carried = [resume_from / IN_CHECKPOINT] if resume_from is not None else []
        tracker = Tracker.resume(uri, run_id, spool_root=spools, carried=carried)
        if resume_from is not None:  # the steps after the checkpoint are trained again
            tracker.skip_logged_steps()
        return tracker
    return Tracker.start_experiment(uri, exp, backend="trl", spool_root=spools)


def _tracking_callback(tracker: Tracker) -> Any:
    """A TrainerCallback spooling each log's numbers (TRL's names, at the optimizer step) into
    ``tracker``, as transformers' MLflow callback logged them, on global rank 0 only — but each
    metric once per step: the end-of-training summary repeats ``epoch`` at the last step."""
    from transformers import TrainerCallback

    class SpoolMetrics(TrainerCallback):
        def __init__(self) -> None:
            self.last_step: dict[str, int] = {}  # metric -> last step it was logged at

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            step = int(state.global_step)
            metrics = {
                _METRIC_NAME.sub("_", key): float(value)
                for key, value in (logs or {}).items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            }
            metrics = {k: v for k, v in metrics.items() if self.last_step.get(k, -1) < step}
            if metrics:
                tracker.log_metrics(metrics, step=step)
                self.last_step.update(dict.fromkeys(metrics, step))

    return SpoolMetrics()


def _model_path(exp: Experiment, root: Path) -> str:
    """The policy's path: the Hub id, an s3:// model downloaded under ``root/models`` (ranks of
    one pod take turns; :func:`sarl.storage.models.materialize`), a pvc:// model where the
    operator mounted it, or the built-in model built here."""
    if not exp.spec.model.is_builtin:
        from sarl.storage.models import materialize

        endpoint = exp.spec.storage.endpoint_url  # else AWS_ENDPOINT_URL, as the checkpoints
        return materialize(exp.spec.model.name, root, endpoint_url=endpoint)
    from sarl.runner.tiny import prepare_tiny_policy

    spec = exp.spec
    return str(prepare_tiny_policy(spec.data, spec.model, cache_dir=root / "cache"))


def _upload_callback(settings: StoreSettings, tracker: Tracker | None) -> Any:
    """A TrainerCallback pushing each saved ``checkpoint-N`` to the store (rank 0 only), with
    the tracking spool's unsent records in it (``sarl-tracking-spool/``, written first: the step's
    metrics are spooled by then, transformers calls ``on_log`` before ``on_save``)."""
    from transformers import TrainerCallback

    uri = settings.uri

    class UploadCheckpoints(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not uri or not state.is_world_process_zero:
                return
            from sarl.storage import open_store

            store = open_store(uri, endpoint_url=settings.endpoint_url)
            step_dir = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if tracker is not None:
                tracker.snapshot(step_dir / IN_CHECKPOINT)
            store.save(state.global_step, step_dir, {"backend": "trl"})
            store.prune(settings.keep_last)

    return UploadCheckpoints()


def _cli(argv: list[str]) -> int:
    if argv[:1] == ["--worker"] and len(argv) == 2:  # a process started by the launcher
        train(argv[1])
        return 0
    parser = job_parser(
        "sarl_jobs.trl_trainer",
        "TRL",
        "role, nodes, processes, launch command, accelerate config, training arguments",
    )
    args = parser.parse_args(argv)
    config = config_of(parser, args)
    return plan_or_run(
        args.dry_run,
        lambda: plan(load_experiment(Path(config)), os.environ, config),
        lambda: main(config),
    )


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
