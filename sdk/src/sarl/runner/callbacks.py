"""Hugging Face ``TrainerCallback``s that connect a local TRL run to MLflow and checkpoints.

Called by ``sarl.runner.local``. Thin adapters: metric renaming, when to save/evaluate/draw,
and hand-offs to :mod:`sarl.tracking`, :mod:`sarl.storage` and :mod:`sarl.runner.evaluate`.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sarl.runner.recorder import BatchRecord
from sarl.runner.saving import PendingUpload, keep_pending, save_with_retries
from sarl.storage.base import StorageError

# TRL's log keys -> sarl metric names (see sarl.tracking.metrics).
_RENAMES = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "completions/mean_length": "response_length",
    "completions/clipped_ratio": "response_clipped_ratio",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "kl": "kl",
    "entropy": "entropy",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
}
# TRL's own metric families; anything else with a "/" came from a sarl reward's log_metric
# ("<reward>/<component>", e.g. structure/clustering, ground_truth/correct) and is kept as is.
_TRL_PREFIXES = ("rewards/", "completions/", "clip_ratio/", "sampling/", "tools/", "vespo/")


def rename_logs(logs: Mapping[str, Any]) -> dict[str, float]:
    """Map TRL's logged values to sarl's metric names (see ``sarl.tracking.metrics``); TRL
    internals not listed in ``_RENAMES`` (timings, token counts, clip ratios) are not logged."""
    out: dict[str, float] = {}
    for key, value in logs.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
            continue
        if key in _RENAMES:
            out[_RENAMES[key]] = float(value)
        elif key.startswith("rewards/sarl_") and key.endswith("/mean"):
            name = key.removeprefix("rewards/sarl_").removesuffix("/mean")
            out[f"reward/{name}"] = float(value)
        elif "/" in key and not key.startswith(_TRL_PREFIXES):
            out[key] = float(value)
    if "reward/structure" in out:
        out["structure/score"] = out["reward/structure"]  # SR, as the curves call it
    return out


class MetricsCallback(TrainerCallback):
    """Per-step metrics to MLflow (plus accuracy from the recorded batch) and the history kept
    for the end-of-run summary."""

    def __init__(self, tracker: Any, record: BatchRecord) -> None:
        self.tracker = tracker
        self.record = record
        self.last: dict[str, float] = {}

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        metrics = rename_logs(logs or {})
        # Only step logs carry a reward; the end-of-training summary log must not repeat these.
        if "reward/mean" in metrics:
            for key, value in (
                ("accuracy", self.record.accuracy()),
                ("answer_rate", self.record.answer_rate()),
            ):
                if value is not None:
                    metrics[key] = value
        if metrics:
            self.tracker.log_metrics(metrics, step=state.global_step)
            self.last.update(metrics)


class PeriodicCallback(TrainerCallback):
    """Runs ``action(step, model)`` every ``every`` steps (not at step 0)."""

    def __init__(self, every: int, action: Callable[[int, Any], object]) -> None:
        self.every = every
        self.action = action

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.global_step % self.every == 0:
            self.action(state.global_step, kwargs.get("model"))


class MapsCallback(PeriodicCallback):
    """Reasoning-map PNGs of sample responses every N steps (a named subclass so transformers
    does not warn about two PeriodicCallbacks)."""


class EvalCallback(PeriodicCallback):
    """Held-out evaluation every N steps."""


class CheckpointCallback(TrainerCallback):
    """Asks the Trainer to save every N steps and at the last step, then uploads the trainer
    checkpoint (weights, optimizer, scheduler, RNG, trainer state) to the store. The store
    writes the manifest last, so an interrupted upload never looks complete. ``before_save``
    gets the local checkpoint directory before the upload (the session checks the run's lease
    and writes the tracking spool's unsent tail into it). Saves are retried
    (:mod:`sarl.runner.saving`); when the last step's checkpoint still fails and ``run_dir`` is
    given, it stays local and :attr:`pending` names it (training is done: not a failed run)."""

    def __init__(
        self,
        store: Any,
        every: int,
        metadata: Mapping[str, Any],
        keep_last: int,
        before_save: Callable[[Path], object] | None = None,
        run_dir: Path | None = None,
    ):
        self.store = store
        self.every = every
        self.metadata = dict(metadata)
        self.keep_last = keep_last
        self.before_save = before_save
        self.saved: list[int] = []
        self.run_dir = run_dir
        self.pending: PendingUpload | None = None

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        step = state.global_step
        if step % self.every == 0 or step >= state.max_steps:
            control.should_save = True

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        step = state.global_step
        output_dir = Path(str(args.output_dir))
        local = output_dir / f"checkpoint-{step}"
        if not local.is_dir() or step in self.saved:
            return
        if self.before_save is not None:
            self.before_save(local)
        metadata = {**self.metadata, "step": step}
        try:
            save_with_retries(self.store, step, local, metadata)
        except StorageError as e:
            if step < state.max_steps or self.run_dir is None:
                raise
            self.pending = keep_pending(self.run_dir, step, local, metadata, e)
            return  # the local checkpoint stays: it is the only copy
        self.store.prune(self.keep_last)
        self.saved.append(step)
        # The store holds it now; keep the local disk bounded.
        for old in output_dir.glob("checkpoint-*"):
            if old != local:
                shutil.rmtree(old, ignore_errors=True)


class StepProgress(TrainerCallback):
    """The training bar (:func:`sarl.progress.progress_bar`: notebook, terminal or log), with
    reward and length as its postfix. Replaces transformers' ``ProgressCallback``, which prints
    every logged value each step (dozens of TRL metrics bury the bar) and redraws with carriage
    returns in logs."""

    def __init__(self) -> None:
        self.bar: Any = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        from sarl.progress import progress_bar

        if state.is_world_process_zero:
            self.bar = progress_bar(
                total=state.max_steps, initial=state.global_step, desc="training", unit="step"
            )

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self.bar is None or not logs:
            return
        shown = {k: logs[k] for k in ("reward", "completions/mean_length") if k in logs}
        postfix = {k.split("/")[-1]: f"{float(v):.3f}" for k, v in shown.items()}
        self.bar.set_postfix(postfix, refresh=False)  # drawn with the next update

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the bar (also when training stops early: an interrupt, an error)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
