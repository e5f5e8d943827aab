"""TRL 1.x training job: GRPO or RLOO with accelerate FSDP2, one process per GPU (torchrun).

Run inside a Kubeflow PyTorchJob (one pod per node, every pod runs the same command)::

    python -m sarl_jobs.trl_trainer /etc/sarl/experiment.yaml

or ``from sarl_jobs.trl_trainer import main; main("experiment.yaml")``. Needs the ``[trl]`` extra
(``pip install -e jobs[trl]``). ``main`` writes accelerate's FSDP2 config
(:func:`sarl.integrations.trl_cluster.accelerate_config`) to a YAML file and runs
``accelerate launch`` (torchrun underneath) with this pod's ``RANK``, ``MASTER_ADDR`` and
``MASTER_PORT`` from the PyTorchJob; every launched process calls :func:`train`.

The spec -> ``GRPOConfig``/``RLOOConfig`` mapping is ``sarl.runner.trl_config.training_args``
(the local runner's), with the cluster's batch layout on top
(:func:`sarl.integrations.trl_cluster.cluster_overrides`); the rewards are
``sarl.integrations.trl.make_trl_reward``. PPO needs a critic and is refused: run it with
:mod:`sarl_jobs.verl_trainer`. Checkpoints: TRL saves every ``storage.every_n_steps``
(full state dict, gathered on rank 0), and rank 0 pushes each ``checkpoint-N`` directory to
``storage.checkpoint_uri`` (or the operator's ``SARL_CHECKPOINT_URI``); at start the newest
complete one is restored from there (:mod:`sarl_jobs.resume`) and training resumes from it.
Tracking: transformers' MLflow callback (``MLFLOW_TRACKING_URI``).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sarl.integrations.trl_cluster import accelerate_config, check_supported, cluster_overrides
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_experiment
from sarl_jobs.cluster import ClusterEnv
from sarl_jobs.resume import StoreSettings, local_trl_checkpoint, restore_trl


def main(cfg_path: str | Path) -> None:
    """Launch :func:`train` on this pod's GPUs with accelerate; see the module docstring."""
    import yaml

    exp = load_experiment(Path(cfg_path))
    check_supported(exp)
    env = ClusterEnv.from_env(os.environ)
    config_file = Path(tempfile.mkdtemp(prefix="sarl-accelerate-")) / "accelerate.yaml"
    config_file.write_text(yaml.safe_dump(accelerate_config(exp)), encoding="utf-8")
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(config_file),
        "--machine_rank", str(env.rank),
        "--main_process_ip", env.master_addr,
        "--main_process_port", str(env.master_port),
        "-m", "sarl_jobs.trl_trainer", "--worker", str(cfg_path),
    ]  # fmt: skip
    subprocess.run(command, check=True)


def train(cfg_path: str | Path, *, output_dir: str | Path = "/tmp/sarl-trl") -> None:
    """One training process (started by accelerate): build the trainer and train."""
    from accelerate import PartialState
    from datasets import Dataset

    from sarl.integrations.trl import make_trl_reward
    from sarl.runner.trl_config import trainer_classes, training_args
    from sarl_jobs.data import problems

    exp = load_experiment(Path(cfg_path))
    check_supported(exp)
    spec = exp.spec
    if spec.tracking.mlflow_uri:
        os.environ.setdefault("MLFLOW_TRACKING_URI", spec.tracking.mlflow_uri)
    os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", spec.tracking.experiment_name or exp.name)
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
    args = dataclasses.replace(local, **cluster_overrides(exp, state.num_processes))
    trainer = trainer_cls(
        model=_model_path(exp, Path(output_dir)),
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
    )
    store = StoreSettings.resolve(exp, os.environ)
    trainer.add_callback(_upload_callback(store))
    # Every node needs the files; one process per node downloads, the others wait for it.
    resume_from = None
    if state.is_local_main_process:
        resume_from = restore_trl(store, Path(output_dir))
    state.wait_for_everyone()
    if resume_from is None:
        resume_from = local_trl_checkpoint(Path(output_dir))
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)


def _model_path(exp: Experiment, root: Path) -> str:
    if not exp.spec.model.is_builtin:
        return exp.spec.model.name
    from sarl.runner.tiny import prepare_tiny_policy

    spec = exp.spec
    return str(prepare_tiny_policy(spec.data, spec.model, cache_dir=root / "cache"))


def _upload_callback(settings: StoreSettings) -> Any:
    """A TrainerCallback pushing each saved ``checkpoint-N`` to the store (rank 0 only)."""
    from transformers import TrainerCallback

    uri = settings.uri

    class UploadCheckpoints(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not uri or not state.is_world_process_zero:
                return
            from sarl.storage import open_store

            store = open_store(uri, endpoint_url=settings.endpoint_url)
            step_dir = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            store.save(state.global_step, step_dir, {"backend": "trl"})
            store.prune(settings.keep_last)

    return UploadCheckpoints()


def _cli(argv: list[str]) -> None:
    if argv[:1] == ["--worker"] and len(argv) == 2:
        train(argv[1])
    elif len(argv) == 1:
        main(argv[0])
    else:
        raise SystemExit("usage: python -m sarl_jobs.trl_trainer EXPERIMENT.yaml")


if __name__ == "__main__":
    _cli(sys.argv[1:])
