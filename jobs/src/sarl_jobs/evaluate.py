"""Evaluation job: avg@k and pass@k of a checkpoint on the math benchmarks, logged to MLflow.

Run::

    python -m sarl_jobs.evaluate --config /etc/sarl/experiment.yaml \
        [--checkpoint PATH_OR_URI] [--data-uri URI] [--benchmarks math500 aime25 ...] [--out DIR]

or ``from sarl_jobs.evaluate import main; main("experiment.yaml")``. Environment:

* ``SARL_CHECKPOINT_URI``: checkpoint (default of ``--checkpoint``): a model directory, or a
  checkpoint store whose latest complete checkpoint is downloaded; none: the spec's base model
  (:mod:`sarl.evaluation.checkpoint`).
* ``SARL_DATA_URI``: where ``sarl data prepare`` wrote the data (default of ``--data-uri``);
  benchmark ``<name>`` is read from ``<SARL_DATA_URI>/benchmarks/<name>.parquet`` (local or
  S3: ``AWS_*`` credentials, endpoint from ``storage.endpoint_url`` or ``AWS_ENDPOINT_URL``).
  ``heldout`` is the task's held-out split (the local runner's), no file needed.
* ``MLFLOW_TRACKING_URI`` (else ``tracking.mlflow_uri``, else ``./.sarl/mlflow.db``) and
  ``MLFLOW_RUN_ID``: log into that run (the training run); its status is put back afterwards.
  Without a run id a new run ``<name>-eval`` is created.

Benchmarks, k, temperature and ``max_problems`` come from ``spec.evaluation``; max new tokens
from ``algorithm.max_response_length``. Generation uses vLLM when it is installed and CUDA is
available, else Hugging Face ``generate`` (:mod:`sarl.evaluation.generation`); answers are
checked with math-verify (``sarl[math]`` required). Logged: ``eval/<benchmark>/avg_at_<k>``,
``pass_at_<k>``, ``answer_rate`` (and ``eval/mean/...`` over several benchmarks) at the
checkpoint's step, plus ``eval/step-<step>/results.jsonl`` (every response and verdict),
``summary.json`` and ``scores.png``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sarl.evaluation.benchmark import (
    BenchmarkProblem,
    MathVerifyChecker,
    ProblemResult,
    benchmark_metrics,
    benchmark_stats,
    problems_from_rows,
    score_problems,
)
from sarl.evaluation.generation import Backend, Generator, make_generator
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_experiment

logger = logging.getLogger(__name__)
HELDOUT = "heldout"
_TERMINAL = ("FINISHED", "FAILED", "KILLED")


def main(
    config_path: str | Path,
    *,
    checkpoint: str | None = None,
    data_uri: str | None = None,
    benchmarks: Sequence[str] | None = None,
    out: str | Path | None = None,
    workdir: str | Path = "/tmp/sarl-eval",
    max_new_tokens: int | None = None,
    backend: Backend = "auto",
    generator: Generator | None = None,
    progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Evaluate and log (see the module docstring); returns the stats per benchmark.

    ``generator`` replaces model loading (the checkpoint is then only used for the step).
    """
    exp = load_experiment(Path(config_path))
    ev = exp.spec.evaluation
    data_uri = data_uri or os.environ.get("SARL_DATA_URI")
    names = list(benchmarks or ev.benchmarks)
    problems = {name: load_problems(exp, name, data_uri) for name in names}  # fail before loading
    workdir = Path(workdir)
    out_dir = Path(out) if out else workdir / "eval"
    from sarl.evaluation.checkpoint import ModelSource, resolve_model

    checkpoint = checkpoint or os.environ.get("SARL_CHECKPOINT_URI")
    source = (
        ModelSource("<given generator>", checkpoint or "<given generator>")
        if generator is not None
        else resolve_model(exp, checkpoint, workdir, progress=progress)
    )
    step = source.step or 0
    with _tracker(exp, source.origin, workdir / "tracking") as tracker:
        if generator is None:
            generator = make_generator(
                source.path, backend=backend, dtype=exp.spec.model.dtype,
                seed=exp.spec.algorithm.seed, progress=progress,
            )  # fmt: skip
        results, stats = _evaluate_all(exp, problems, generator, max_new_tokens)
        tracker.log_metrics(benchmark_metrics(stats, ev.k), step=step)
        _log_artifacts(tracker, results, stats, ev.k, out_dir / f"step-{step:08d}", step)
    for name, s in stats.items():
        logger.info("%s: avg@%d %.4f pass@%d %.4f", name, ev.k, s["avg@k"], ev.k, s["pass@k"])
    return stats


def load_problems(exp: Experiment, name: str, data_uri: str | None) -> list[BenchmarkProblem]:
    """Problems of benchmark ``name`` capped at ``evaluation.max_problems``; ValueError naming
    the benchmark and file."""
    limit = exp.spec.evaluation.max_problems
    if name == HELDOUT:
        from sarl_jobs.data import problems, verl_rows

        _, evals = problems(exp)
        return problems_from_rows(name, verl_rows(exp, evals, "test"), "heldout split", limit)
    if not data_uri:
        raise ValueError(
            f"benchmark {name!r}: no data location; set SARL_DATA_URI or --data-uri to where "
            "`sarl data prepare` wrote benchmarks/<name>.parquet"
        )
    from sarl.datasets.uris import join, read_parquet

    uri = join(data_uri, "benchmarks", f"{name}.parquet")
    rows = read_parquet(uri, endpoint_url=exp.spec.storage.endpoint_url)
    return problems_from_rows(name, rows, uri, limit)


def _evaluate_all(
    exp: Experiment,
    problems: dict[str, list[BenchmarkProblem]],
    generator: Generator,
    max_new_tokens: int | None,
) -> tuple[list[ProblemResult], dict[str, dict[str, float]]]:
    ev = exp.spec.evaluation
    tokens = max_new_tokens or exp.spec.algorithm.max_response_length
    checker = MathVerifyChecker()
    results: list[ProblemResult] = []
    stats: dict[str, dict[str, float]] = {}
    try:
        for name, items in problems.items():
            logger.info("%s: %d problems x %d samples", name, len(items), ev.k)
            prompts = [generator.render(p.messages) for p in items]
            samples = generator(prompts, k=ev.k, max_new_tokens=tokens, temperature=ev.temperature)
            scored = score_problems(items, prompts, samples, checker)
            stats[name] = benchmark_stats(scored, ev.k)
            results += scored
    finally:
        checker.close()
    return results, stats


def _log_artifacts(
    tracker: Any,
    results: list[ProblemResult],
    stats: dict[str, dict[str, float]],
    k: int,
    out_dir: Path,
    step: int,
) -> None:
    from sarl.evaluation.report import (
        CHART_FILE,
        RESULTS_FILE,
        SUMMARY_FILE,
        plot_scores,
        write_results,
        write_summary,
    )

    write_results(results, out_dir / RESULTS_FILE)
    write_summary(stats, k, out_dir / SUMMARY_FILE)
    plot_scores(stats, k, out_dir / CHART_FILE, title=f"step {step}: avg@{k} / pass@{k}")
    tracker.log_artifact(out_dir, f"eval/step-{step:08d}")


@contextmanager
def _tracker(exp: Experiment, origin: str, spool_root: Path) -> Iterator[Any]:
    """The MLflow run to log into: ``MLFLOW_RUN_ID`` (status restored at the end) or new.

    Metrics and artifacts are spooled under ``spool_root`` and sent in the background
    (:mod:`sarl.tracking.tracker`): an MLflow outage during the evaluation costs nothing; at the
    end the job waits ``SARL_TRACKING_FINISH_WAIT_S`` for the drain, and what is still spooled
    then is named in one warning line with the ``sarl tracking flush`` command that sends it.
    """

    from sarl.spec.loggable import logged_experiment
    from sarl.tracking.store import default_tracking_uri, make_client, preflight
    from sarl.tracking.tracker import Tracker, flatten_params

    uri = (
        os.environ.get("MLFLOW_TRACKING_URI")
        or exp.spec.tracking.mlflow_uri
        or default_tracking_uri()
    )
    preflight(uri)
    tags = {"sarl.eval.model": origin[:5000]}
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        # params and the spec artifact: allow-listed fields only (issue 38 item 8), redacted
        params, spec_yaml = logged_experiment(exp.model_dump(mode="json"))
        tracking = exp.spec.tracking
        with Tracker.start(
            uri, tracking.experiment_name or exp.name, f"{exp.name}-eval",
            tags={**tracking.tags, **tags, "sarl.kind": "evaluation"},
            params=flatten_params(params), spec_yaml=spec_yaml,
            spool_root=spool_root,
            description=f"Evaluation of {origin[:500]} ({exp.name!r}'s benchmarks).",
        ) as tracker:  # fmt: skip
            yield tracker
        return
    before = make_client(uri).get_run(run_id).info.status
    tracker = Tracker.resume(uri, run_id, spool_root=spool_root)
    try:
        tracker.set_tags(tags)
        yield tracker
    finally:
        if before in _TERMINAL:
            tracker.finish(before)  # evaluation never changes how training ended
        else:  # still training: leave it RUNNING, but send everything
            left = tracker.drain(tracker.settings.finish_wait_s)
            tracker.abandon()
            if left:
                logger.warning(
                    "tracking: %d eval records still spooled in %s; send them with: "
                    "sarl tracking flush %s",
                    left,
                    tracker.spool_dir,
                    tracker.spool_dir,
                )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sarl_jobs.evaluate", description=__doc__)
    p.add_argument("--config", required=True, help="Experiment YAML")
    p.add_argument("--checkpoint", help="model dir or checkpoint store URI")
    p.add_argument("--data-uri", help="directory or s3:// prefix with benchmarks/<name>.parquet")
    p.add_argument("--benchmarks", nargs="+", help="default: spec.evaluation.benchmarks")
    p.add_argument("--out", help="local directory for the artifacts")
    p.add_argument("--workdir", default="/tmp/sarl-eval")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto")
    return p


def _cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    try:
        main(
            args.config, checkpoint=args.checkpoint, data_uri=args.data_uri,
            benchmarks=args.benchmarks, out=args.out, workdir=args.workdir,
            max_new_tokens=args.max_new_tokens, backend=args.backend,
            progress=sys.stderr.isatty(),
        )  # fmt: skip
    except (
        ValueError,
        RuntimeError,
        OSError,
        ImportError,
    ) as e:  # incl. Dataset/Storage/TrackingError
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
