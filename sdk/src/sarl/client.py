"""``sarl.Client``: the Python entry point to run Experiments from notebooks and scripts.

``sarl.Client.local().run(exp)`` trains on this machine (the embedded default) and returns a
:class:`~sarl.runner.result.RunResult`; ``.study(doc)`` runs a Study here
(:class:`~sarl.study.runner.StudyResult`); ``.compare(...)`` puts runs side by side
(:class:`~sarl.tracking.compare.Comparison`). Each result renders as a table in Jupyter and in a
terminal. ``sarl.Client().submit(exp)`` runs it on a Kubernetes cluster with the sarl platform
chart installed (``Client`` is :class:`sarl.cluster.ClusterClient`: submit, get, list, status,
wait, logs, delete; needs ``pip install 'sarl[cluster]'``). Called by users and by ``sarl run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sarl.cluster.client import ClusterClient
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_document, load_experiment, load_study, validate_study
from sarl.spec.presets import deep_merge
from sarl.spec.study import Study
from sarl.workdir import resolve_workdir

if TYPE_CHECKING:
    from sarl.runner.result import RunResult
    from sarl.study.runner import StudyResult
    from sarl.tracking.compare import Comparison, HasRunId


class LocalClient:
    """Runs Experiments on this machine (CPU, TRL, local or remote MLflow, local or S3 storage)."""

    def __init__(
        self,
        *,
        workdir: str | Path | None = None,
        tracking_uri: str | None = None,
        progress: bool = True,
    ) -> None:
        # None: the CLI's default too (sarl.workdir), so notebooks and `sarl run` share a store.
        self.workdir = resolve_workdir(workdir)
        self.tracking_uri = tracking_uri
        self.progress = progress

    def validate(
        self,
        experiment: Experiment | dict[str, Any] | str | Path,
        *,
        overrides: Mapping[str, Any] | None = None,
    ) -> Experiment:
        """Load and validate; raises ``sarl.spec.SpecError`` with a one-line message.
        ``overrides`` (e.g. ``{"algorithm": {"max_steps": 16}}``) are merged over the spec
        first, nested mappings merging (:func:`sarl.spec.load_experiment`)."""
        return load_experiment(experiment, overrides=overrides)

    def run(
        self,
        experiment: Experiment | dict[str, Any] | str | Path,
        *,
        overrides: Mapping[str, Any] | None = None,
        resume: bool = False,
    ) -> RunResult:
        """Train locally (``overrides`` as :meth:`validate` takes them). ``resume`` continues
        from the last complete checkpoint and the same MLflow run. Ctrl-C (a notebook's
        "interrupt") closes the MLflow run ``KILLED`` and stops the run's worker processes
        before ``KeyboardInterrupt`` reaches the caller; running again (``resume=True`` to
        continue) works in the same process."""
        from sarl.progress import quiet_tqdm_notebook_warning
        from sarl.runner.local import LocalOptions, run_local

        exp = load_experiment(experiment, overrides=overrides)
        quiet_tqdm_notebook_warning()
        opts = LocalOptions(
            workdir=self.workdir,
            tracking_uri=self.tracking_uri,
            resume=resume,
            progress=self.progress,
        )
        return run_local(exp, opts)

    def study(
        self,
        study: Study | dict[str, Any] | str | Path,
        *,
        overrides: Mapping[str, Any] | None = None,
        seeds: Sequence[int] | None = None,
        jobs: int | None = None,
        out_dir: str | Path | None = None,
    ) -> StudyResult:
        """Run every arm x seed of a Study here (finished runs are skipped, interrupted ones
        resume) and report it. ``overrides`` merge over the Study's ``spec.base`` as
        :meth:`run` merges them over a spec (every arm gets them), ``seeds`` replaces
        ``spec.seeds``. ``jobs`` runs at once (default ``spec.parallelism``), each in its
        own process; rewards defined in the notebook itself need ``jobs=1``. The result shows the
        report's table in Jupyter; ``result.to_frame()`` gives it to pandas (``result.tables()``:
        the long tables), ``result.figure()`` draws the curves with their interval bands and
        ``result.curves_png`` is the PNG the report wrote."""
        from sarl.progress import quiet_tqdm_notebook_warning
        from sarl.study.runner import StudyOptions, run_study

        doc = _study_with(study, overrides, seeds)
        quiet_tqdm_notebook_warning()
        opts = StudyOptions(
            workdir=self.workdir,
            tracking_uri=self.tracking_uri,
            jobs=jobs or doc.spec.parallelism,
            progress=self.progress,
            out_dir=Path(out_dir) if out_dir is not None else None,
        )
        return run_study(doc, opts)

    def compare(
        self,
        *runs: str | HasRunId,
        experiments: Sequence[str] = (),
        latest: bool = False,
    ) -> Comparison:
        """Compare runs of this client's store (``tracking_uri``, else ``<workdir>/mlflow.db``):
        ``runs`` are run ids or names, Study names or ``RunResult`` s, ``experiments`` names
        whose runs all join (only the newest of each, or its newest Study's runs, with
        ``latest``). See :func:`sarl.tracking.compare.compare`."""
        from sarl.tracking.compare import compare
        from sarl.tracking.store import default_tracking_uri

        uri = self.tracking_uri or default_tracking_uri(self.workdir)
        return compare(*runs, experiments=experiments, latest=latest, tracking_uri=uri)


def _study_with(
    source: Study | dict[str, Any] | str | Path,
    overrides: Mapping[str, Any] | None,
    seeds: Sequence[int] | None,
) -> Study:
    """The Study ``source`` with ``overrides`` merged over its base and ``seeds`` set."""
    if overrides is None and seeds is None:
        return load_study(source)
    if isinstance(source, Study):  # what its author set; defaults stay defaults on re-validation
        data, label = source.model_dump(mode="json", exclude_unset=True), ""
    else:
        data, label = load_document(source)
    spec = data.get("spec")
    if isinstance(spec, dict):  # anything else is left for validation to refuse
        spec = dict(spec)
        if overrides is not None:
            base = spec.get("base")
            spec["base"] = deep_merge(base if isinstance(base, dict) else {}, dict(overrides))
        if seeds is not None:
            spec["seeds"] = list(seeds)
        data = {**data, "spec": spec}
    return validate_study(data, f"{label} + overrides" if label else "")


class Client(ClusterClient):
    """``Client()`` (kubeconfig or in-cluster; see :class:`~sarl.cluster.ClusterClient` for the
    options) submits to a cluster; ``Client.local()`` trains on this machine."""

    @staticmethod
    def local(
        *,
        workdir: str | Path | None = None,
        tracking_uri: str | None = None,
        progress: bool = True,
    ) -> LocalClient:
        """A client that trains here; ``workdir`` (default: the one ``sarl run`` uses,
        :func:`sarl.workdir.default_workdir`) holds the MLflow store, checkpoints and caches."""
        return LocalClient(workdir=workdir, tracking_uri=tracking_uri, progress=progress)
