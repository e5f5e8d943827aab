"""The resource plan: what an Experiment or a Study needs of GPUs, disks and the store, before
anything is created on a cluster.

``sarl plan FILE`` prints it (:mod:`sarl.cli.plan`); ``sarl submit`` and the operator refuse a
spec whose plan does not fit (:func:`refusal`, called by
:func:`sarl.integrations.cluster.check_cluster` and the Study paths). Modules: ``shapes``
(model architectures), ``memory`` (per-GPU terms), ``storage`` (checkpoints, scratch, store),
``hours`` (steps and GPU-hours), ``plan`` (one Experiment), ``study`` (a Study), ``render``
(the table). Pure: no cluster, no network, no trainer imports.
"""

from __future__ import annotations

from collections.abc import Mapping

from sarl.plan.plan import Check, ExperimentPlan, plan_experiment
from sarl.plan.study import StudyPlan, plan_study
from sarl.spec.experiment import Experiment
from sarl.spec.study import Study

__all__ = [
    "STORE_CAPACITY_ENV",
    "Check",
    "ExperimentPlan",
    "StudyPlan",
    "check_plan",
    "check_study_plan",
    "plan_experiment",
    "plan_study",
    "refusal",
    "store_capacity_from_env",
]


def refusal(misfits: list[Check], where: str = "") -> str:
    """One message for the checks that do not fit: each names its field, the numbers and the
    fix; ``where`` prefixes it (e.g. a Study's arm and seed)."""
    head = f"{where}: " if where else ""
    lines = "; ".join(c.message() for c in misfits)
    return f"{head}the resource plan does not fit (`sarl plan` shows it): {lines}"


#: The operator's environment variable holding the platform store's room for checkpoints (a
#: Kubernetes quantity; set by charts/sarl-platform from the bundled store's volume size or
#: ``objectStore.external.capacity``; empty: unknown, not checked).
STORE_CAPACITY_ENV = "SARL_STORE_CAPACITY"


def store_capacity_from_env(env: Mapping[str, str]) -> int | None:
    """Bytes of :data:`STORE_CAPACITY_ENV`, None when unset or empty; ValueError naming the
    variable when it is not a quantity (a chart value gone wrong)."""
    from sarl.plan.units import parse_quantity

    raw = (env.get(STORE_CAPACITY_ENV) or "").strip()
    if not raw:
        return None
    try:
        return parse_quantity(raw)
    except ValueError as e:
        raise ValueError(f"{STORE_CAPACITY_ENV}: {e}") from e


def _platform_store(capacity: int | None, endpoint_url: str | None) -> int | None:
    """The platform store's capacity applies to checkpoints in the platform's store only (no
    ``storage.endpoint_url`` of the spec's own)."""
    return capacity if endpoint_url is None else None


def check_plan(exp: Experiment, store_capacity: int | None = None) -> None:
    """Raise ValueError (:func:`refusal`) when ``exp``'s plan does not fit its GPUs, its
    scratch disk or (``store_capacity``, bytes of the platform's store) its store."""
    capacity = _platform_store(store_capacity, exp.spec.storage.endpoint_url)
    misfits = plan_experiment(exp, store_capacity=capacity).misfits
    if misfits:
        raise ValueError(refusal(misfits))


def check_study_plan(study: Study, store_capacity: int | None = None) -> None:
    """Raise ValueError when the Study's runs together overflow the platform's store (each
    run's own checks are :func:`check_plan`'s, through ``check_cluster``)."""
    capacity = _platform_store(store_capacity, study.spec.base.storage.endpoint_url)
    if capacity is None:
        return
    misfits = [c for c in plan_study(study, store_capacity=capacity).checks if not c.fits]
    if misfits:
        raise ValueError(refusal(misfits))
