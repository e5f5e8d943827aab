"""The embedded default: run an Experiment locally on CPU with TRL (GRPO or RLOO).

Called by ``sarl run EXPERIMENT.yaml --local`` and ``sarl.Client.local().run(exp)``. Order of
work: preflight (fails in seconds with one line) -> data -> policy (built-in tiny Qwen, warm
started and cached, or a local HF model) -> rewards -> MLflow run (new, or the checkpoint's on
``--resume``) -> TRL training with callbacks for metrics, reasoning maps, evaluation and
checkpoints -> final evaluation and a summary. What ``--resume`` continues, and how kills are
cleaned up after, is described in :mod:`sarl.runner.session`; what a run returns is a
:class:`~sarl.runner.result.RunResult` and its options a
:class:`~sarl.runner.options.LocalOptions` (both re-exported here).
"""

from __future__ import annotations

from typing import Any

from sarl.runner import preflight
from sarl.runner.options import LocalOptions
from sarl.runner.result import RunResult
from sarl.spec.experiment import Experiment


def resolve_uris(exp: Experiment, opts: LocalOptions) -> tuple[str, str]:
    """(tracking URI, checkpoint URI) with local defaults under ``opts.workdir``."""
    from sarl.tracking.tracker import default_tracking_uri

    tracking = (
        opts.tracking_uri or exp.spec.tracking.mlflow_uri or default_tracking_uri(opts.workdir)
    )
    ckpt = exp.spec.storage.checkpoint_uri or str(
        (opts.workdir / "checkpoints" / exp.name).resolve()
    )
    return tracking, ckpt


def run_preflight(exp: Experiment, opts: LocalOptions) -> tuple[str, str]:
    """Every check that can fail before training; returns the resolved URIs."""
    preflight.check_algorithm(exp)
    preflight.check_data(exp)
    preflight.check_model(exp)
    tracking, ckpt = resolve_uris(exp, opts)
    # Name where the URI came from: a flag's value reported as the spec's field misleads.
    source = opts.tracking_uri_flag if opts.tracking_uri else "tracking.mlflow_uri"
    preflight.check_tracking(tracking, source)
    preflight.check_storage(exp, ckpt)
    return tracking, ckpt


def run_local(exp: Experiment, opts: LocalOptions | None = None) -> RunResult:
    """Train ``exp`` locally; see the module docstring for the sequence."""
    opts = opts or LocalOptions()
    tracking_uri, ckpt_uri = run_preflight(exp, opts)
    rewards = _build_rewards(exp)  # before data/model work: bad settings fail fast
    from sarl.runner.session import LocalSession  # torch, transformers, TRL: only to train

    with LocalSession(exp, opts, tracking_uri, ckpt_uri, rewards) as run:
        return run.train()


def _build_rewards(exp: Experiment) -> list[tuple[Any, float]]:
    from sarl.rewards.registry import create_reward

    built = []
    for term in exp.spec.reward:
        built.append((create_reward(term.name, term.settings), term.weight))
    return built


__all__ = ["LocalOptions", "RunResult", "resolve_uris", "run_local", "run_preflight"]
