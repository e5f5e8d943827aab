"""Checks that run before any training starts, so a bad spec fails in seconds with one line.

Called by ``sarl.runner.local.run_local``. Each check raises :class:`PreflightError` naming the
spec field and value: PPO requested locally, a missing dataset, a policy neither on disk nor
in the Hugging Face cache (downloads off), an
unreachable tracking server, an unreachable or missing bucket, a reward that cannot be built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sarl.spec.experiment import Experiment


class PreflightError(RuntimeError):
    """The experiment cannot run locally as specified; the message is one line."""


def check_algorithm(exp: Experiment) -> None:
    algo = exp.spec.algorithm
    if algo.name == "ppo":
        raise PreflightError(
            "spec.algorithm.name='ppo': PPO (GAE + critic) runs on the verl backend on a "
            "cluster; TRL 1.x has no PPO trainer. Use 'grpo' or 'rloo' for local runs, or "
            "`sarl submit` it (spec.resources.backend: verl)."
        )
    if algo.kl_type not in ("low_var_kl", "k3"):
        # TRL estimates the KL with k3 (Schulman), which is verl's low_var_kl before clamping.
        raise PreflightError(
            f"spec.algorithm.kl_type={algo.kl_type!r}: local (TRL) runs estimate KL with k3 "
            "('low_var_kl'/'k3'); set spec.algorithm.kl_type: low_var_kl here, or `sarl "
            "submit` it (spec.resources.backend: verl runs the other estimators)"
        )


def check_data(exp: Experiment) -> None:
    data = exp.spec.data
    if data.task != "dataset" or data.dataset is None:
        return
    if data.dataset.startswith("s3://"):
        raise PreflightError(
            f"spec.data.dataset={data.dataset!r}: local runs read local files; "
            "download it first (s3 datasets are read by cluster jobs)"
        )
    if not Path(data.dataset).is_file():
        raise PreflightError(f"spec.data.dataset={data.dataset!r}: no such file")


def check_model(exp: Experiment, env: Mapping[str, str] | None = None) -> None:
    """The policy is a directory, or a Hub id in the Hugging Face cache, or downloads are
    allowed (:mod:`sarl.runner.policy_source`)."""
    from sarl.runner.policy_source import PolicyNotFound, resolve_policy

    model = exp.spec.model
    if model.is_builtin:
        return
    try:
        resolve_policy(model.name, os.environ if env is None else env)
    except PolicyNotFound as e:
        raise PreflightError(str(e)) from e


def check_tracking(uri: str, source: str = "tracking.mlflow_uri") -> None:
    """MLflow reachable at ``uri``; the error names ``source`` (the field or flag it came from)."""
    from sarl.tracking.tracker import TrackingError, preflight

    try:
        preflight(uri, source=source)
    except TrackingError as e:
        raise PreflightError(str(e)) from e


def check_storage(exp: Experiment, uri: str) -> None:
    from sarl.storage import StorageError, open_store

    try:
        open_store(uri, endpoint_url=exp.spec.storage.endpoint_url).check_access()
    except (StorageError, ValueError) as e:
        raise PreflightError(f"spec.storage.checkpoint_uri={uri!r}: {e}") from e
