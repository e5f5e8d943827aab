"""One local training session: builds the TRL trainer and drives it with sarl's callbacks.

Called only by ``sarl.runner.local.run_local`` after preflight succeeded. Imports torch,
transformers, TRL and datasets (the ``[trl]`` and ``[local]`` extras).

Resume is exact. The session holds the run directory's lock (:mod:`sarl.runner.rundir`) and turns
SIGTERM/SIGHUP into an interrupt (:mod:`sarl.runner.interrupt`), so any ending but SIGKILL closes
the MLflow run (``KILLED`` after a signal or Ctrl-C, ``FAILED`` after an error). At the start it
removes what killed runs left (checkpoint temp directories, half-written trainer checkpoints) and
marks a run that died by SIGKILL ``KILLED``. ``--resume`` continues the run named by the newest
complete checkpoint, or by the run marker when it was killed before its first checkpoint (then it
starts over from step 0 in that run); steps the run already holds are not logged again
(:meth:`~sarl.tracking.tracker.Tracker.skip_logged_steps`). A checkpoint at the run's last step
means there is nothing to train: a FINISHED run is left untouched, one killed after its last
checkpoint gets its final evaluation and is closed FINISHED.

One owner per run: before the store is touched the session takes the run's lease in it
(:mod:`sarl.runner.ownership`, :mod:`sarl.storage.lease`), checks it before each checkpoint and
releases it at the end. A fault outside sarl (disk full, a dead embedding service) ends the run in
one line and closes it FAILED with the reason (:mod:`sarl.runner.faults`); a last checkpoint the
store refuses stays local for ``--resume`` to upload (:mod:`sarl.runner.saving`).

Tracking outages. Metrics, maps and evaluations go to the run's spool
(``<run dir>/tracking/<run id>``, :mod:`sarl.tracking.spool`) and are sent in the background, so an
MLflow outage never stops training. Every checkpoint carries the spool's unsent tail
(``sarl-tracking-spool/`` among its files, written before the store makes it visible); a resume
adopts it, so steps whose metrics had not reached MLflow are sent from there, even on another
machine. At the end the run waits ``finish_wait_s`` for the drain; records left then are named
in the result (:attr:`~sarl.runner.result.RunResult.spooled`) and sent by ``sarl tracking flush``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from sarl.progress import status_line, transformers_bars_off
from sarl.runner.faults import RunFailed, close_failed, explain
from sarl.runner.interrupt import signals_interrupt
from sarl.runner.options import LocalOptions
from sarl.runner.ownership import RunOwnership, tag_owner
from sarl.runner.policy_source import resolve_policy
from sarl.runner.result import RunResult, refused_records
from sarl.runner.resume import RunLookup, planned_steps, resume_note
from sarl.runner.rundir import RunDir, RunMarker
from sarl.runner.tied_weights import quiet_tied_missing_keys
from sarl.spec.experiment import Experiment
from sarl.tracking.tracker import ABORT_WAIT_S

logger = logging.getLogger(__name__)
N_MAPS = 3  # sample responses drawn per map-logging step


class LocalSession:
    """Owns the tracker, store and rewards of one run; as a context manager it holds the run's
    lock and closes the MLflow run KILLED (signal, Ctrl-C) or FAILED (error) when training ends
    early."""

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
        self._logged: dict[str, int] = {}  # metric -> last step a continued run already held
        self._evals: dict[int, dict[str, float]] = {}  # step -> held-out metrics logged there
        self.root = opts.workdir / "runs" / exp.name
        self.rundir = RunDir(self.root)
        self.runs = RunLookup(self.rundir, tracking_uri, ckpt_uri)
        self._stack = contextlib.ExitStack()
        self.owner: RunOwnership | None = None  # the run's lease, once train() took it

    def __enter__(self) -> LocalSession:
        try:
            self._stack.enter_context(self.rundir.locked(self.exp.name))
            self._stack.enter_context(signals_interrupt())
            self._stack.enter_context(transformers_bars_off())
        except BaseException:
            self._stack.close()
            self._close_rewards()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        from sarl.storage.base import StorageError
        from sarl.tracking.tracker import TrackingError

        # A known fault (disk full, a dead service, a lost lease) becomes one line, recorded on
        # the MLflow run as it is closed (sarl.runner.faults).
        reason = explain(exc, self._places()) if isinstance(exc, Exception) else None
        try:
            if self.tracker is not None and exc_type is not None:
                status = "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
                close_failed(self.tracker, status, reason, ABORT_WAIT_S)  # never raises
            self._close_rewards()
        finally:
            self._stack.close()  # signal handlers back, the lease released, then the lock
        if reason is not None and not isinstance(exc, StorageError | TrackingError):
            raise RunFailed(reason) from exc  # callers show those two as they are already

    def _places(self) -> dict[str, Path | str]:
        """Where this run writes, for :func:`sarl.runner.faults.explain`."""
        places: dict[str, Path | str] = {
            "run": self.root, "trainer": self.rundir.trainer, "checkpoints": self.ckpt_uri
        }  # fmt: skip
        if self.tracker is not None:  # what `sarl tracking flush` takes
            places["spool"] = self.tracker.spool_dir
        return places

    def _close_rewards(self) -> None:
        for reward, _ in self.rewards:
            reward.close()

    def train(self) -> RunResult:
        import warnings

        from sarl.runner.saving import upload_pending
        from sarl.storage import open_store

        # transformers renames gradient checkpointing; TRL still calls the old names each step.
        warnings.filterwarnings(
            "ignore", message=".*gradient_checkpointing.*", category=FutureWarning
        )

        spec = self.exp.spec
        store = open_store(self.ckpt_uri, endpoint_url=spec.storage.endpoint_url)
        # One owner per run (sarl.runner.ownership), before anything in the store is touched.
        self.owner = self._stack.enter_context(RunOwnership(store, take_over=self.opts.take_over))
        upload_pending(store, self.root)  # a finished run's last checkpoint the store refused
        store.clean_leftovers()  # of killed saves; a running save's directory is locked
        latest = store.latest() if self.opts.resume else None
        run_id = self.runs.to_continue(latest, self.opts.resume)
        note = resume_note(self.opts.resume, latest, run_id)
        if note:  # a killed run starting over; a first run says nothing
            logger.warning(note)
        self.runs.close_abandoned(keep=run_id)
        train_problems, eval_problems = self._problems()
        last = spec.algorithm.max_steps
        if latest is not None and last is not None and latest.step >= last:
            return self._complete(store, latest, run_id, eval_problems)
        model, tokenizer = self._policy(train_problems)
        trainer, record = self._trainer(model, tokenizer, train_problems)
        if latest is not None and latest.step >= planned_steps(trainer):
            return self._complete(store, latest, run_id, eval_problems)
        # A new run starts with an empty trainer/ (no checkpoint of a killed run in the way).
        resume_dir = self._download(store, latest) if latest else self.rundir.prepare_trainer(None)
        self.tracker = self._tracker(run_id, resume_dir)
        self.rundir.write_marker(RunMarker(self.tracker.run_id, self.tracking_uri, self.ckpt_uri))
        self._add_callbacks(trainer, record, store, eval_problems, tokenizer)
        if latest is None:
            # Step 0: the policy before any RL update, so a run's change in held-out accuracy is
            # measured from where RL started (a run resumed from a checkpoint logged it already).
            status_line(
                f"{self.exp.name}: step-0 evaluation of {len(eval_problems)} held-out problems "
                f"(k={spec.evaluation.k}), before any RL update…",
                enabled=self.opts.progress and bool(eval_problems),
            )
            self._evaluate(model, tokenizer, eval_problems, 0)
            self._log_first_maps(model, tokenizer, train_problems)
        with quiet_tied_missing_keys(trainer.model):  # tied lm_head: not in the checkpoint
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
            experiment_id=self.tracker.experiment_id,
            tracking_uri=self.tracking_uri,
            checkpoint_uri=self.ckpt_uri,
            steps=trainer.state.global_step,
            final_metrics=metrics,
            resumed_from=latest.step if latest else None,
            name=self.exp.name,
            spooled=self.tracker.left,
            spool_dir=str(self.tracker.spool_dir),
            tracking_refused=refused_records(self.tracker),
            upload_pending=self._ckpt_cb.pending.local if self._ckpt_cb.pending else None,
        )

    # -- nothing left to train -------------------------------------------------------------

    def _complete(
        self, store: Any, latest: Any, run_id: str | None, eval_problems: list[Any]
    ) -> RunResult:
        """``latest`` is the run's last step: nothing to train. A FINISHED run is left as it is
        (nothing logged, nothing pruned); one killed after its last checkpoint gets the final
        evaluation it missed and is closed FINISHED."""
        from sarl.tracking.metrics import eval_pass_at
        from sarl.tracking.store import run_url

        run = self.runs.find(run_id) if run_id else None
        metrics = dict(run.data.metrics) if run is not None else {}
        finished = run is not None and run.info.status == "FINISHED"
        if run is not None and finished:
            url = run_url(self.tracking_uri, run.info.experiment_id, run.info.run_id)
        else:
            checkpoint = self._download(store, latest)  # its spool tail is sent with the run
            self.tracker = self._tracker(run_id, checkpoint)
            key = eval_pass_at("heldout", self.exp.spec.evaluation.k)
            if self._logged.get(key, -1) < latest.step:
                model, tokenizer = self._load_policy(checkpoint)
                metrics.update(self._evaluate(model, tokenizer, eval_problems, latest.step))
            self.tracker.finish("FINISHED")
            url = self.tracker.run_url
        return RunResult(
            run_id=run.info.run_id if run is not None else self.tracker.run_id,
            run_url=url,
            experiment_id=run.info.experiment_id if run is not None else self.tracker.experiment_id,
            tracking_uri=self.tracking_uri,
            checkpoint_uri=self.ckpt_uri,
            steps=latest.step,
            final_metrics=metrics,
            resumed_from=latest.step,
            already_finished=finished,
            name=self.exp.name,
            spooled=0 if self.tracker is None else self.tracker.left,
            spool_dir=None if self.tracker is None else str(self.tracker.spool_dir),
            tracking_refused=refused_records(self.tracker),
        )

    # -- building blocks -------------------------------------------------------------------

    def _problems(self) -> tuple[list[Any], list[Any]]:
        from sarl.tasks.experiment import experiment_problems

        return experiment_problems(self.exp)

    def _policy(self, train_problems: list[Any]) -> tuple[Any, Any]:
        spec = self.exp.spec
        if spec.model.is_builtin:
            from sarl.runner.tiny import prepare_tiny_policy

            # The first run builds a tokenizer and warm-starts the policy (its own bar follows);
            # later runs load it from the cache.
            status_line(
                f"{self.exp.name}: preparing the built-in policy (warm start on first use, "
                f"cached under {self.opts.workdir / 'cache'})…",
                enabled=self.opts.progress,
            )

            path = prepare_tiny_policy(
                spec.data,
                spec.model,
                cache_dir=self.opts.workdir / "cache",
                max_response_tokens=spec.algorithm.max_response_length,
                progress=self.opts.progress,
            )
        else:
            # A directory, a cached Hub id (offline) or an allowed download (policy_source).
            source = resolve_policy(spec.model.name, os.environ)
            line = f"{self.exp.name}: policy from {source.where} ({source.target})"
            status_line(line, enabled=self.opts.progress)
            return self._load_policy(source.target, offline=source.offline)
        return self._load_policy(path)

    def _load_policy(self, path: Path | str, offline: bool = True) -> tuple[Any, Any]:
        """Model and tokenizer from a Hugging Face directory (a trainer checkpoint is one), or
        a Hub id to download when not ``offline``."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=offline)
        tokenizer.padding_side = "left"  # decoder-only generation pads on the left
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=offline)
        return model, tokenizer

    def _tracker(self, run_id: str | None, checkpoint: Path | None = None) -> Any:
        """The run's tracker: ``run_id`` continued (adopting the spool tail ``checkpoint``
        carries, if any) or a new run; its spool is ``<run dir>/tracking/<run id>``."""
        from sarl.tracking.spool import IN_CHECKPOINT
        from sarl.tracking.tracker import Tracker

        spools = self.root / "tracking"
        if run_id:
            carried = [checkpoint / IN_CHECKPOINT] if checkpoint is not None else []
            tracker = Tracker.resume(self.tracking_uri, run_id, spool_root=spools, carried=carried)
            # It replays the steps logged between its checkpoint and the interruption.
            self._logged = tracker.skip_logged_steps()
        else:
            tracker = Tracker.start_experiment(
                self.tracking_uri, self.exp, backend="local-trl", spool_root=spools
            )
        if self.owner is not None:
            tag_owner(tracker, self.owner)
        return tracker

    def _download(self, store: Any, latest: Any) -> Path:
        """The trainer checkpoint of ``latest``: the local copy when it holds exactly the stored
        files, else downloaded. Removes everything else in ``trainer/``."""
        local = self.rundir.prepare_trainer(latest)
        if local is not None:
            return local
        return Path(store.download(latest, self.rundir.trainer / f"checkpoint-{latest.step}"))

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
            from sarl.runner.callbacks import StepProgress

            self._progress = StepProgress()
            self._stack.callback(self._progress.close)  # the bar ends with the session
            trainer.add_callback(self._progress)
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
        self._ckpt_cb = CheckpointCallback(
            store,
            spec.storage.every_n_steps,
            {"mlflow_run_id": self.tracker.run_id, "experiment": self.exp.name},
            spec.storage.keep_last,
            before_save=self._before_save,
            run_dir=self.root,
        )
        trainer.add_callback(self._ckpt_cb)

    def _before_save(self, local: Path) -> None:
        """Before a checkpoint is stored: still the run's owner, and the step's metrics (spooled
        already: on_log runs before on_save) have their unsent tail in the checkpoint."""
        from sarl.tracking.spool import IN_CHECKPOINT

        if self.owner is not None:
            self.owner.check()
        self.tracker.snapshot(local / IN_CHECKPOINT)

    def _log_maps(self, step: int, record: Any) -> None:
        """Maps of the first responses of the batch TRL scored at ``step``."""
        truth = record.ground_truth[:N_MAPS] if record.ground_truth else [None] * N_MAPS
        self._draw_maps(
            step,
            record.prompts[:N_MAPS],
            record.completions[:N_MAPS],
            record.completion_ids[:N_MAPS] if record.completion_ids is not None else None,
            truth,
        )

    def _log_first_maps(self, model: Any, tokenizer: Any, problems: list[Any]) -> None:
        """Step 0: maps of the policy before any RL update, on the first training prompts, so
        the maps of a run show before and after (sampled as training samples)."""
        from sarl.runner.maps import sample_responses

        if self._map_reward() is None or not problems:
            return
        spec = self.exp.spec
        chosen = problems[:N_MAPS]
        prompts = [spec.data.prompt_template.format(question=p.question) for p in chosen]
        texts, ids = sample_responses(
            model,
            tokenizer,
            prompts,
            max_new_tokens=spec.algorithm.max_response_length,
            temperature=spec.algorithm.temperature,
            seed=spec.algorithm.seed,
        )
        self._draw_maps(0, prompts, texts, ids, [str(p.answer) for p in chosen])

    def _map_reward(self) -> Any:
        """The run's structure reward (the one with a scorer), or None: no maps to draw."""
        return next((r for r, _ in self.rewards if hasattr(r, "scorer")), None)

    def _draw_maps(
        self,
        step: int,
        prompts: list[Any],
        texts: list[str],
        ids: list[list[int]] | None,
        truth: list[Any],
    ) -> None:
        from sarl.integrations.trl import policy_batch
        from sarl.runner.maps import MapSample, draw_sample_maps, run_label

        reward = self._map_reward()
        if reward is None:
            return
        samples = [
            MapSample(prompt, text, None if answer is None else str(answer))
            for prompt, text, answer in zip(prompts, texts, truth, strict=False)
        ]
        where = f"maps/step-{step:06d}"
        label = run_label(self.exp.name, self.exp.spec.tracking.tags)
        # A policy embedder embeds the maps' steps as it embedded them for the reward.
        with policy_batch(reward, prompts, ids, texts):
            paths = draw_sample_maps(
                samples, reward.scorer, self.root / where, run=label, step=step
            )
        for path in paths:
            self.tracker.log_image(path, where)

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
