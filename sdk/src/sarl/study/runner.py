"""Run a Study locally: every arm x seed as a local Experiment, nested under one MLflow run.

Called by ``sarl study run STUDY.yaml --local [-j N]`` and ``sarl.Client.local().study(...)``.
Order of work:

1. preflight of every run (tracking, storage, data, model) before anything trains;
2. the Study's parent MLflow run: reused when a parent of this exact Study document exists
   (tag ``sarl.study_hash``), so re-running continues the same Study; a changed document starts
   a new parent (its runs would not be comparable with the old ones);
3. the built-in policy's warm start(s), once, before any run starts (parallel runs would
   otherwise build the same policy side by side);
4. the runs, seed-major, ``jobs`` at a time (one spawned process per run, torch threads split
   between them: :mod:`sarl.study.processes`): a run FINISHED under this parent is skipped; one
   with a checkpoint resumes from it (same MLflow run); others start fresh. A failing run does
   not stop the others; it is reported and the Study ends FAILED. Rewards registered in
   ``__main__`` (a notebook cell, a script) cannot be imported by those processes: such a Study
   is refused before anything starts unless it runs with ``jobs=1`` (in this process);
5. the report (``sarl.study.report``) over the finished runs: ``summary.json``, ``report.md``,
   ``curves.png`` in ``out_dir`` and under ``report/`` of the parent run.

Each run's checkpoints go to ``<workdir>/checkpoints/<study>/<parent run id>/<run name>`` unless
the spec names a checkpoint location, so a new parent never resumes an old parent's checkpoints.

An interrupt (Ctrl-C, a notebook's "interrupt", SIGTERM/SIGHUP) stops the runs in progress (each
closes its MLflow run KILLED), starts no other, closes the parent run KILLED and re-raises.
What a Study returns is a :class:`~sarl.study.result.StudyResult` (re-exported here).
"""

from __future__ import annotations

import hashlib
import json
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sarl.spec.experiment import Experiment
from sarl.spec.study import (
    TAG_ARM,
    TAG_PARENT,
    TAG_ROLE,
    TAG_SEED,
    TAG_STUDY,
    Study,
    StudyRun,
    parent_run_tags,
)
from sarl.study.result import RunOutcome, StudyResult

if TYPE_CHECKING:
    from sarl.study.aggregate import StudyReport

TAG_HASH = "sarl.study_hash"


@dataclass
class StudyOptions:
    """Local knobs of a Study run that are not part of the document (where and how fast)."""

    workdir: Path = Path(".sarl")
    tracking_uri: str | None = None
    jobs: int | None = None  # default: spec.parallelism, else 1
    progress: bool = True
    out_dir: Path | None = None  # default: out/<study>
    #: How the caller names ``tracking_uri`` in errors about it (the CLI: ``--tracking-uri``).
    tracking_uri_flag: str = "tracking_uri"


def study_hash(study: Study) -> str:
    """Hash of the Study's spec (what its runs are), not of its metadata labels."""
    blob = json.dumps(study.spec.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def run_study(study: Study, opts: StudyOptions | None = None) -> StudyResult:
    """Run every arm x seed of ``study`` here; see the module docstring for the sequence."""
    from sarl.runner.interrupt import signals_interrupt
    from sarl.runner.local import LocalOptions, run_preflight

    opts = opts or StudyOptions()
    modules = check_importable_rewards(study, opts.jobs or 1)
    first = study.runs()[0].experiment
    local = LocalOptions(opts.workdir, opts.tracking_uri, tracking_uri_flag=opts.tracking_uri_flag)
    tracking_uri, _ = run_preflight(first, local)
    named = opts.tracking_uri_flag if opts.tracking_uri else "tracking.mlflow_uri"
    # SIGTERM/SIGHUP end the Study as Ctrl-C does: runs stopped, parent run closed KILLED.
    with signals_interrupt():
        parent = open_parent_run(study, tracking_uri, parent_spools(opts.workdir, study))
        result = StudyResult(
            study.name, parent.run_id, tracking_uri, experiment_id=parent.experiment_id
        )
        try:
            runs = [
                _with_checkpoints(r, study, parent.run_id, opts) for r in study.runs(parent.run_id)
            ]
            for run in runs:  # every run's own checks, before anything trains
                again = LocalOptions(opts.workdir, tracking_uri, tracking_uri_flag=named)
                run_preflight(run.experiment, again)
            _prepare_policies([r.experiment for r in runs], opts)
            result.outcomes = _run_all(runs, parent.run_id, tracking_uri, opts, modules)
            result.out_dir = opts.out_dir or Path("out") / study.name
            result.report = _report(study, tracking_uri, parent.run_id, result.out_dir)
        except BaseException as e:
            parent.finish("KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
            raise
        parent.finish("FAILED" if result.failed else "FINISHED")
    return result


def check_importable_rewards(study: Study, jobs: int) -> list[str]:
    """The modules a Study's run processes must import to find its rewards by name.

    With ``jobs`` > 1 each run trains in a fresh process (:mod:`sarl.study.processes`), which
    knows the built-in rewards and dotted paths, and rewards registered by the modules returned
    here (imported there first). A reward defined in ``__main__`` (a notebook cell, a script)
    cannot be imported by another process: :class:`~sarl.runner.preflight.PreflightError` naming
    it and the two ways out. With ``jobs`` = 1 the runs share this process and its registry.
    """
    from sarl.rewards.registry import get_reward_class
    from sarl.runner.preflight import PreflightError

    if jobs <= 1:
        return []
    modules: dict[str, None] = {}
    names = dict.fromkeys(t.name for r in study.runs() for t in r.experiment.spec.reward)
    for name in names:
        module = get_reward_class(name).__module__
        if module in ("__main__", "__mp_main__"):
            raise PreflightError(
                f"reward {name!r} is defined in __main__ (a notebook or a script), which the "
                f"Study's {jobs} parallel run processes cannot import: move it into a module "
                "and import it from there (or name it 'package.module:Class'), or run the "
                "Study with jobs=1 (in this process)"
            )
        if not module.startswith("sarl."):  # built-ins register themselves when looked up
            modules[module] = None
    return list(modules)


def parent_spools(workdir: Path, study: Study) -> Path:
    """Where the parent run's tracking spool lives: in the workdir, as each run's does
    (``<workdir>/runs/<name>/tracking``), never under the current directory, where a stray
    ``.sarl`` would become the next notebook's or command's workdir and split the store."""
    return workdir / "studies" / study.name / "tracking"


def open_parent_run(study: Study, tracking_uri: str, spool_root: Path) -> Any:
    """The Study's parent run (a :class:`~sarl.tracking.tracker.Tracker`, its spool under
    ``spool_root``): the newest one of this exact document, else a new one, described for
    MLflow's UI (what the Study compares; the experiment it creates says where to click to see
    the arms)."""
    import yaml

    from sarl.spec.loggable import DOCUMENT_NOTE, loggable_study
    from sarl.spec.secrets import redact
    from sarl.tracking.describe import experiment_description, study_description
    from sarl.tracking.store import guarded, make_client
    from sarl.tracking.tracker import STUDY_SPEC_ARTIFACT, Tracker, flatten_params

    digest = study_hash(study)
    client = make_client(tracking_uri)
    experiment = guarded(
        tracking_uri,
        f"looking up experiment {study.mlflow_experiment!r}",
        lambda: client.get_experiment_by_name(study.mlflow_experiment),
    )
    if experiment is not None and experiment.lifecycle_stage == "active":
        query = (
            f"tags.`{TAG_ROLE}` = 'study' and tags.`{TAG_STUDY}` = '{study.name}' "
            f"and tags.`{TAG_HASH}` = '{digest}'"
        )
        found = guarded(
            tracking_uri,
            f"looking up the parent run of Study {study.name!r}",
            lambda: client.search_runs(
                [experiment.experiment_id],
                query,
                order_by=["attributes.start_time DESC"],
                max_results=1,
            ),
        )
        if found:
            return Tracker.resume(tracking_uri, found[0].info.run_id, spool_root=spool_root)
    # The stored Study document: its allow-listed fields only (issue 38 item 8), redacted.
    doc = redact(loggable_study(study.model_dump(mode="json")))
    return Tracker.start(
        tracking_uri,
        study.mlflow_experiment,
        study.name,
        spool_root=spool_root,
        tags={**parent_run_tags(study.name), TAG_HASH: digest},
        params=flatten_params(
            {"arms": [a.name for a in study.spec.arms], "seeds": study.spec.seeds}
        ),
        spec_yaml=DOCUMENT_NOTE + yaml.safe_dump(doc, sort_keys=False),
        spec_artifact=STUDY_SPEC_ARTIFACT,
        description=study_description(study),
        experiment_description=experiment_description(study.mlflow_experiment, study),
    )


def _with_checkpoints(run: StudyRun, study: Study, parent: str, opts: StudyOptions) -> StudyRun:
    """``run`` with a checkpoint location private to this parent run (unless the spec has one)."""
    spec = run.experiment.spec
    if spec.storage.checkpoint_uri:
        return run
    where = (opts.workdir / "checkpoints" / study.name / parent / run.name).resolve()
    storage = spec.storage.model_copy(update={"checkpoint_uri": str(where)})
    exp = run.experiment.model_copy(update={"spec": spec.model_copy(update={"storage": storage})})
    return StudyRun(run.arm, run.seed, exp)


def _prepare_policies(experiments: list[Experiment], opts: StudyOptions) -> None:
    """Build each distinct built-in starting policy once (runs of a Study usually share one)."""
    from sarl.runner.tiny import prepare_tiny_policy

    seen: set[str] = set()
    for exp in experiments:
        spec = exp.spec
        if not spec.model.is_builtin:
            continue
        budget = spec.algorithm.max_response_length
        key = json.dumps(
            [spec.data.model_dump(mode="json"), spec.model.model_dump(mode="json"), budget]
        )
        if key in seen:
            continue
        seen.add(key)
        prepare_tiny_policy(
            spec.data,
            spec.model,
            cache_dir=opts.workdir / "cache",
            max_response_tokens=budget,
            progress=opts.progress,
        )


def _finished_runs(tracking_uri: str, parent: str) -> dict[tuple[str, int], str]:
    """(arm, seed) -> run id of the runs already FINISHED under ``parent``."""
    from sarl.tracking.store import guarded, make_client

    client = make_client(tracking_uri)
    run = guarded(tracking_uri, f"reading run {parent}", lambda: client.get_run(parent))
    found = guarded(
        tracking_uri,
        f"listing the runs of parent {parent}",
        lambda: client.search_runs(
            [run.info.experiment_id],
            f"tags.`{TAG_PARENT}` = '{parent}' and attributes.status = 'FINISHED'",
            max_results=10_000,
        ),
    )
    out: dict[tuple[str, int], str] = {}
    for r in found:
        tags = r.data.tags
        if TAG_ARM in tags and tags.get(TAG_SEED, "").isdigit():
            out.setdefault((tags[TAG_ARM], int(tags[TAG_SEED])), r.info.run_id)
    return out


def _run_all(
    runs: list[StudyRun],
    parent: str,
    tracking_uri: str,
    opts: StudyOptions,
    modules: Sequence[str] = (),
) -> list[RunOutcome]:
    from sarl.progress import progress_bar

    done = _finished_runs(tracking_uri, parent)
    outcomes: list[RunOutcome] = []
    todo: list[StudyRun] = []
    for run in runs:
        if (run.arm, run.seed) in done:
            outcomes.append(
                RunOutcome(run.arm, run.seed, run.name, "skipped", done[(run.arm, run.seed)])
            )
        else:
            todo.append(run)
    jobs = max(1, min(opts.jobs or 1, len(todo) or 1))
    bar = progress_bar(
        total=len(runs), initial=len(outcomes), desc="study runs", unit="run", enabled=opts.progress
    )

    def record(outcome: RunOutcome) -> None:
        outcomes.append(outcome)
        bar.update(1)

    try:
        if jobs == 1:
            for run in todo:
                bar.set_postfix_str(run.name)
                record(_run_one(run, opts.workdir, tracking_uri, opts.progress, threads=None))
        else:
            threads = max(1, (os.cpu_count() or 1) // jobs)
            _run_parallel(todo, opts, tracking_uri, jobs, threads, record, modules)
    finally:
        bar.close()
    order = {(r.arm, r.seed): i for i, r in enumerate(runs)}
    return sorted(outcomes, key=lambda o: order[(o.arm, o.seed)])


def _run_parallel(
    todo: list[StudyRun],
    opts: StudyOptions,
    tracking_uri: str,
    jobs: int,
    threads: int,
    record: Callable[[RunOutcome], None],
    modules: Sequence[str],
) -> None:
    from sarl.study.processes import Call, run_in_processes

    def done(index: int, outcome: Any, error: str | None) -> None:
        run = todo[index]
        if error is not None:  # the process died (e.g. out of memory) or was stopped
            outcome = RunOutcome(run.arm, run.seed, run.name, "failed", error=error)
        record(outcome)

    calls = [Call(_run_one, (run, opts.workdir, tracking_uri, False, threads)) for run in todo]
    run_in_processes(calls, jobs, done, imports=modules)


def _run_one(
    run: StudyRun, workdir: Path, tracking_uri: str, progress: bool, threads: int | None
) -> RunOutcome:
    """Train one arm x seed (in this process or a worker); never raises for a training error."""
    from sarl.runner.local import LocalOptions, run_local

    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    try:
        # Always resume: with a checkpoint it continues from there; without one it continues the
        # MLflow run of a worker killed before its first checkpoint (so each arm x seed keeps one
        # run); with neither it starts afresh.
        result = run_local(
            run.experiment,
            LocalOptions(
                workdir=workdir, tracking_uri=tracking_uri, resume=True, progress=progress
            ),
        )
    except KeyboardInterrupt:
        raise
    except Exception as e:
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        return RunOutcome(run.arm, run.seed, run.name, "failed", error=detail)
    status = "resumed" if result.resumed_from is not None else "finished"
    return RunOutcome(run.arm, run.seed, run.name, status, result.run_id)


def _report(study: Study, tracking_uri: str, parent: str, out_dir: Path) -> StudyReport | None:
    """The Study report over the finished runs (None when no run finished)."""
    from sarl.study.report import NoFinishedRuns, report_for

    try:
        return report_for(tracking_uri, parent, out_dir, log=True, study=study)
    except NoFinishedRuns:
        return None


__all__ = [
    "RunOutcome",
    "StudyOptions",
    "StudyResult",
    "check_importable_rewards",
    "run_study",
    "study_hash",
]
