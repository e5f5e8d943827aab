"""The resource plan of a Study: each run's plan and what the runs need together.

Called by :func:`sarl.plan.plan_document` (``sarl plan``), by
:func:`sarl.cluster.documents.load_study_for_cluster` (``sarl submit``) and by the operator's
Study handler. The runs' checkpoints all stay in the store once written (``keep_last`` per run),
and up to ``parallelism`` runs upload at once, each one checkpoint above its ``keep_last``; the
shared served models (one InferenceService per model for the whole Study) are counted once.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sarl.plan.plan import Check, ExperimentPlan, plan_experiment
from sarl.spec.study import Study


class StudyPlan(BaseModel):
    """Per-run plans (arm, seed) and the Study's totals and checks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    parallelism: int
    runs: list[tuple[str, int, ExperimentPlan]]
    store_bytes: int | None
    peak_gpus: int
    gpu_hours: float | None
    checks: list[Check]

    @property
    def misfits(self) -> list[tuple[str, Check]]:
        """(where, check) of every check that does not fit, the Study's own first."""
        out = [("study", c) for c in self.checks if not c.fits]
        for arm, seed, run in self.runs:
            out += [(f"{arm} seed {seed}", c) for c in run.misfits]
        return out


def plan_study(
    study: Study,
    *,
    train_rows: int | None = None,
    store_capacity: int | None = None,
    read_local: bool = False,
) -> StudyPlan:
    """The plan of every run of ``study`` and of the Study as a whole (``read_local``: as
    :func:`~sarl.plan.plan.plan_experiment`)."""
    expanded = study.runs()
    runs = [
        (
            run.arm,
            run.seed,
            plan_experiment(run.experiment, train_rows=train_rows, read_local=read_local),
        )
        for run in expanded
    ]
    plans = [plan for _, _, plan in runs]
    parallelism = min(study.spec.parallelism or len(plans), len(plans))
    store: int | None = None
    if all(p.checkpoint_bytes is not None for p in plans):
        sizes = sorted((p.checkpoint_bytes or 0 for p in plans), reverse=True)
        kept = sum(
            (p.checkpoint_bytes or 0) * r.experiment.spec.storage.keep_last
            for p, r in zip(plans, expanded, strict=True)
        )
        store = kept + sum(sizes[:parallelism])  # the runs uploading at once
    served = max((p.served_gpus for p in plans), default=0)
    peak_gpus = parallelism * max((p.trainer_gpus for p in plans), default=0) + served
    hours = [p.gpu_hours for p in plans]
    checks = []
    if store is not None:
        checks.append(
            Check(
                what=f"the object store ({len(plans)} runs' checkpoints, "
                f"{parallelism} uploading at once)",
                need=store,
                have=store_capacity,
                field="spec.base.storage.checkpoint_uri",
                fix="point it at a store with room (external S3; the platform's bundled store "
                "is a trial store), or lower spec.base.storage.keep_last",
            )
        )
    return StudyPlan(
        name=study.metadata.name,
        parallelism=parallelism,
        runs=runs,
        store_bytes=store,
        peak_gpus=peak_gpus,
        gpu_hours=None if any(h is None for h in hours) else sum(h or 0.0 for h in hours),
        checks=checks,
    )
