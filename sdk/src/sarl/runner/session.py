"""One local training session: builds the TRL trainer and drives it with sarl's callbacks.

Called only by ``sarl.runner.local.run_local`` after preflight succeeded. Imports torch,
transformers, TRL and datasets (the ``[trl]`` and ``[local]`` extras).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from sarl.runner.local import LocalOptions, RunResult
from sarl.spec.experiment import Experiment

N_MAPS = 3  # sample responses drawn per map-logging step


class LocalSession:
    """Owns the tracker, store and rewards of one run; marks the MLflow run FAILED on errors."""

    def __init__(
        self,
        exp: Experiment,
        opts: LocalOptions,
        tracking_uri: str,
        ckpt_uri: str,
        rewards: list[tuple[Any, float]],
    ) -> None:
        self.exp = exp
        self.opts = opts
        self.tracking_uri = tracking_uri
        self.ckpt_uri = ckpt_uri
        self.rewards = rewards
        self.tracker: Any = None
        self._evals: dict[int, dict[str, float]] = {}  # step -> held-out metrics logged there
        self.root = opts.workdir / "runs" / exp.name
        self.root.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> LocalSession:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.tracker is not None and exc_type is not None:
            status = "KILLED" if exc_type is KeyboardInterrupt else "FAILED"
            # Never mask the original error with a tracking failure.
            with contextlib.suppress(Exception):
                self.tracker.finish(status)
        for reward, _ in self.rewards:
            reward.close()

    def train(self) -> RunResult:
        import warnings

        from sarl.storage import open_store

        # transformers renames gradient checkpointing; TRL still calls the old names each step.
        warnings.filterwarnings(
            "ignore", message=".*gradient_checkpointing.*", category=FutureWarning
        )

        spec = self.exp.spec
        store = open_store(self.ckpt_uri, endpoint_url=spec.storage.endpoint_url)
        latest = store.latest() if self.opts.resume else None
        train_problems, eval_problems = self._problems()
        model, tokenizer = self._policy(train_problems)
        self.tracker = self._tracker(latest)
        resume_dir = self._download(store, latest)
        trainer, record = self._trainer(model, tokenizer, train_problems)
        self._add_callbacks(trainer, record, store, eval_problems, tokenizer)
        if latest is None:
            # Step 0: the policy before any RL update, so a run's change in held-out accuracy is
            # measured from where RL started (a resumed run already logged it).
            self._evaluate(model, tokenizer, eval_problems, 0)
        trainer.train(resume_from_checkpoint=str(resume_dir) if resume_dir else None)
        step = trainer.state.global_step
        final = self._evals.get(step) or self._evaluate(
            trainer.model, tokenizer, eval_problems, step
        )
        metrics = {**self._metrics_cb.last, **final}
        self.tracker.finish("FINISHED")
        return RunResult(
            run_id=self.tracker.run_id,
            run_url=self.tracker.run_url,
            tracking_uri=self.tracking_uri,
            checkpoint_uri=self.ckpt_uri,
            steps=trainer.state.global_step,
            final_metrics=metrics,
            resumed_from=latest.step if latest else None,
        )

    # -- building blocks -------------------------------------------------------------------

    def _problems(self) -> tuple[list[Any], list[Any]]:
        from sarl.tasks.experiment import experiment_problems

        return experiment_problems(self.exp)

    def _policy(self, train_problems: list[Any]) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        spec = self.exp.spec
        if spec.model.is_builtin:
            from sarl.runner.tiny import prepare_tiny_policy

            path = prepare_tiny_policy(
                spec.data,
                spec.model,
                cache_dir=self.opts.workdir / "cache",
                max_response_tokens=spec.algorithm.max_response_length,
                progress=self.opts.progress,
            )
        else:
            path = Path(spec.model.name).expanduser()
        tokenizer = AutoTokenizer.from_pretrained(path)
        tokenizer.padding_side = "left"  # decoder-only generation pads on the left
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path)
        return model, tokenizer

    def _tracker(self, latest: Any) -> Any:
        import yaml

        from sarl.tracking.tracker import Tracker, flatten_params

        run_id = (latest.metadata or {}).get("mlflow_run_id") if latest else None
        if run_id:
            return Tracker.resume(self.tracking_uri, str(run_id))
        spec = self.exp.model_dump(mode="json")
        tracking = self.exp.spec.tracking
        return Tracker.start(
            self.tracking_uri,
            tracking.experiment_name or self.exp.name,
            self.exp.name,
            tags={**tracking.tags, "sarl.backend": "local-trl"},
            params=flatten_params(spec["spec"]),
            spec_yaml=yaml.safe_dump(spec, sort_keys=False),
        )

    def _download(self, store: Any, latest: Any) -> Path | None:
        if latest is None:
            return None
        dest = self.root / "trainer" / f"checkpoint-{latest.step}"
        if not dest.exists():
            store.download(latest, dest)
        return dest

    def _trainer(self, model: Any, tokenizer: Any, problems: list[Any]) -> tuple[Any, Any]:
        from datasets import Dataset

        from sarl.integrations.trl import bind_trainer, make_trl_reward
        from sarl.runner.recorder import BatchRecord, recording
        from sarl.runner.trl_config import trainer_classes, training_args

        spec = self.exp.spec
        template = spec.data.prompt_template
        dataset = Dataset.from_dict(
            {
                "prompt": [template.format(question=p.question) for p in problems],
                "ground_truth": [p.answer for p in problems],
            }
        )
        record = BatchRecord()
        trl_funcs = [
            make_trl_reward(reward=r, num_generations=spec.algorithm.rollouts_per_prompt)
            for r, _ in self.rewards
        ]
        funcs: list[Any] = list(trl_funcs)
        funcs[0] = recording(funcs[0], record)  # the first one records the batch for logging
        config_cls, trainer_cls = trainer_classes(spec.algorithm.name)
        args = training_args(
            config_cls,
            self.exp,
            self.root / "trainer",
            [w for _, w in self.rewards],
            progress=self.opts.progress,
        )
        trainer = trainer_cls(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        # embedder.kind 'policy' embeds steps with the policy TRL trains (SARL v1 A.1, A); the
        # stop token ids give rewards TRL's truncation flag (tag_maxflow masks truncated ones).
        bind_trainer(trl_funcs, trainer)
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        # Both print every logged value each step; sarl logs them to MLflow instead.
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        if self.opts.progress:
            from sarl.runner.callbacks import quiet_progress_callback

            trainer.add_callback(quiet_progress_callback())
        return trainer, record

    def _add_callbacks(
        self, trainer: Any, record: Any, store: Any, eval_problems: list[Any], tokenizer: Any
    ) -> None:
        from sarl.runner.callbacks import (
            CheckpointCallback,
            EvalCallback,
            MapsCallback,
            MetricsCallback,
        )

        spec = self.exp.spec
        self._metrics_cb = MetricsCallback(self.tracker, record)
        trainer.add_callback(self._metrics_cb)
        trainer.add_callback(
            MapsCallback(
                spec.tracking.log_maps_every_n_steps, lambda step, _m: self._log_maps(step, record)
            )
        )
        trainer.add_callback(
            EvalCallback(
                spec.evaluation.every_n_steps,
                lambda step, m: self._evaluate(m, tokenizer, eval_problems, step),
            )
        )
        trainer.add_callback(
            CheckpointCallback(
                store,
                spec.storage.every_n_steps,
                {"mlflow_run_id": self.tracker.run_id, "experiment": self.exp.name},
                spec.storage.keep_last,
            )
        )

    def _log_maps(self, step: int, record: Any) -> None:
        from sarl.integrations.trl import policy_batch
        from sarl.runner.maps import draw_sample_maps

        reward = next((r for r, _ in self.rewards if hasattr(r, "scorer")), None)
        if reward is None:
            return
        texts = record.completions[:N_MAPS]
        ids = record.completion_ids[:N_MAPS] if record.completion_ids is not None else None
        # A policy embedder embeds the maps' steps as it embedded them for the reward.
        with policy_batch(reward, record.prompts[:N_MAPS], ids, texts):
            paths = draw_sample_maps(texts, reward.scorer, self.root / "maps" / f"step-{step:06d}")
        for path in paths:
            self.tracker.log_image(path, f"maps/step-{step:06d}")

    def _evaluate(
        self, model: Any, tokenizer: Any, problems: list[Any], step: int
    ) -> dict[str, float]:
        from sarl.runner.evaluate import evaluate_problems
        from sarl.tracking.metrics import eval_avg_at, eval_pass_at

        if model is None or not problems:
            return {}
        ev = self.exp.spec.evaluation
        stats = evaluate_problems(
            model,
            tokenizer,
            problems,
            self.exp.spec.data.prompt_template,
            k=ev.k,
            max_new_tokens=self.exp.spec.algorithm.max_response_length,
            temperature=ev.temperature,
        )
        names = {"avg@k": eval_avg_at("heldout", ev.k), "pass@k": eval_pass_at("heldout", ev.k)}
        metrics = {
            names.get(key, f"eval/heldout/{key}"): value
            for key, value in stats.items()
            if key in names or key == "answer_rate"
        }
        self.tracker.log_metrics(metrics, step=step)
        self._evals[step] = metrics
        return metrics
