"""``sarl.Client``: the Python entry point to run Experiments from notebooks and scripts.

``sarl.Client.local().run(exp)`` trains on this machine (the embedded default);
``sarl.Client().submit(exp)`` runs it on a Kubernetes cluster with the sarl platform chart
installed (``Client`` is :class:`sarl.cluster.ClusterClient`: submit, get, list, status, wait,
logs, delete; needs ``pip install 'sarl[cluster]'``). Called by users and by ``sarl run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sarl.cluster.client import ClusterClient
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_experiment, load_study
from sarl.spec.study import Study

if TYPE_CHECKING:
    from sarl.study.runner import StudyResult


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

    def validate(self, experiment: Experiment | dict[str, Any] | str | Path) -> Experiment:
        """Load and validate; raises ``sarl.spec.SpecError`` with a one-line message."""
        return load_experiment(experiment)

    def run(
        self, experiment: Experiment | dict[str, Any] | str | Path, *, resume: bool = False
    ) -> Any:
        """Train locally; returns a ``sarl.runner.local.RunResult``. ``resume`` continues from
        the last complete checkpoint and the same MLflow run."""
        from sarl.runner.local import LocalOptions, run_local

        exp = load_experiment(experiment)
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
        resume) and report it. The result holds the report (``result.report``, tables as pandas
        DataFrames via ``result.tables()``) and the curves PNG (``result.figure``)."""
        from sarl.study.runner import StudyOptions, run_study

        doc = load_study(study)
        opts = StudyOptions(
            workdir=self.workdir,
            tracking_uri=self.tracking_uri,
            jobs=jobs or doc.spec.parallelism,
            progress=self.progress,
            out_dir=Path(out_dir) if out_dir is not None else None,
        )
        return run_study(doc, opts)


class Client(ClusterClient):
    """``Client()`` (kubeconfig or in-cluster; see :class:`~sarl.cluster.ClusterClient` for the
    options) submits to a cluster; ``Client.local()`` trains on this machine."""

    @staticmethod
    def local(
        *, workdir: str | Path = ".sarl", tracking_uri: str | None = None, progress: bool = True
    ) -> LocalClient:
        return LocalClient(workdir=workdir, tracking_uri=tracking_uri, progress=progress)
