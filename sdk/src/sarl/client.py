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
from sarl.spec.loader import load_experiment, load_study
from sarl.spec.study import Study

if TYPE_CHECKING:
    from sarl.runner.result import RunResult
    from sarl.study.runner import StudyResult
    from sarl.tracking.compare import Comparison, HasRunId


class LocalClient:
    """Runs Experiments on this machine (CPU, TRL, local or remote MLflow, local or S3 storage)."""

    def __init__(
        self,
        *,
        workdir: str | Path = ".sarl",
        tracking_uri: str | None = None,
        progress: bool = True,
    ) -> None:
        self.workdir = Path(workdir)
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
        jobs: int | None = None,
        out_dir: str | Path | None = None,
    ) -> StudyResult:
        """Run every arm x seed of a Study here (finished runs are skipped, interrupted ones
        resume) and report it. ``jobs`` runs at once (default ``spec.parallelism``), each in its
        own process; rewards defined in the notebook itself need ``jobs=1``. The result shows the
        report's table in Jupyter; ``result.to_frame()`` gives it to pandas (``result.tables()``:
        the long tables), ``result.figure()`` draws the curves with their interval bands and
        ``result.curves_png`` is the PNG the report wrote."""
        from sarl.progress import quiet_tqdm_notebook_warning
        from sarl.study.runner import StudyOptions, run_study

        doc = load_study(study)
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


class Client(ClusterClient):
    """``Client()`` (kubeconfig or in-cluster; see :class:`~sarl.cluster.ClusterClient` for the
    options) submits to a cluster; ``Client.local()`` trains on this machine."""

    @staticmethod
    def local(
        *, workdir: str | Path = ".sarl", tracking_uri: str | None = None, progress: bool = True
    ) -> LocalClient:
        return LocalClient(workdir=workdir, tracking_uri=tracking_uri, progress=progress)
