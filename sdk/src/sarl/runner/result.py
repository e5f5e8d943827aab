"""What a local run returns: :class:`RunResult`, with its rendering for notebooks and terminals.

Built by :class:`sarl.runner.session.LocalSession` at the end of a run; returned by
``sarl.Client.local().run(...)`` and :func:`sarl.runner.local.run_local`. In Jupyter a result shows
its headline metrics and where its MLflow run is (``_repr_html_``); ``rich.print`` and ``print``
show the same table (:mod:`sarl.display`). :meth:`RunResult.maps` reads back the reasoning maps
the run logged, :meth:`RunResult.to_frame` gives its final metrics to pandas (imported lazily).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sarl import display
from sarl.tracking.describe import LOCAL_UI, browse_lines, ui_url
from sarl.tracking.metrics import ACCURACY, ENTROPY, KL, RESPONSE_LENGTH, REWARD_MEAN

if TYPE_CHECKING:
    import pandas as pd

    from sarl.tracking.tracker import Tracker

#: Metrics a run's summary shows first, when it logged them; then every held-out metric.
HEADLINE_METRICS = (
    REWARD_MEAN,
    "reward/structure",
    "reward/ground_truth",
    ACCURACY,
    "structure/clustering",
    "structure/path_length",
    RESPONSE_LENGTH,
    KL,
    ENTROPY,
)
_MAP_DIR = re.compile(r"^maps/step-(\d+)$")


def refused_records(tracker: Tracker | None) -> int:
    """Records that will never reach MLflow as they are: refused for their content
    (``rejected.jsonl``) or damaged in the spool (``quarantine.jsonl``)."""
    return 0 if tracker is None else tracker.rejected + tracker.quarantined


@dataclass(frozen=True)
class RunResult(display.Rendered):
    """What a finished local run produced."""

    run_id: str
    run_url: str | None
    tracking_uri: str
    checkpoint_uri: str
    steps: int
    final_metrics: dict[str, float] = field(default_factory=dict)
    resumed_from: int | None = None
    # ``--resume`` of a run that had finished: nothing was trained, logged or pruned.
    already_finished: bool = False
    name: str = ""  # the Experiment's name (``metadata.name``), also the MLflow run's name
    # Tracking records MLflow had not taken when the run ended; ``sarl tracking flush`` sends them.
    spooled: int = 0
    spool_dir: str | None = None
    # Tracking records MLflow refused for their content or found damaged: set aside in the
    # spool (rejected.jsonl, quarantine.jsonl), never sent; the run's record is then incomplete.
    tracking_refused: int = 0
    experiment_id: str | None = None  # the MLflow experiment holding the run
    # The final checkpoint the store refused (sarl.runner.saving): kept here for --resume.
    upload_pending: str | None = None

    # -- data ------------------------------------------------------------------------------------

    def headline(self) -> dict[str, float]:
        """The final metrics a summary shows: :data:`HEADLINE_METRICS`, then ``eval/*``."""
        keys = [*HEADLINE_METRICS, *sorted(k for k in self.final_metrics if k.startswith("eval/"))]
        return {k: self.final_metrics[k] for k in keys if k in self.final_metrics}

    def to_frame(self) -> pd.DataFrame:
        """One row (index: the run's name): ``run_id``, ``steps`` and every final metric, so the
        frames of several runs concatenate into one table."""
        import pandas as pd

        row: dict[str, Any] = {"run_id": self.run_id, "steps": self.steps, **self.final_metrics}
        return pd.DataFrame([row], index=pd.Index([self.name or self.run_id], name="run"))

    def maps(self, step: int | None = None) -> display.Gallery:
        """The reasoning maps of sample responses the run logged to MLflow (``maps/step-N``):
        those of ``step``, by default of the last step that has maps. Without maps (no
        ``structure`` reward, or ``tracking.log_maps_every_n_steps`` beyond the run's steps) the
        gallery is empty and says so; ``ValueError`` names the logged steps when ``step`` has
        none."""
        import tempfile
        from pathlib import Path

        from sarl.progress import mlflow_bars_off
        from sarl.tracking.store import guarded, make_client

        client = make_client(self.tracking_uri)
        found = guarded(
            self.tracking_uri,
            f"listing the maps of run {self.run_id}",
            lambda: client.list_artifacts(self.run_id, "maps"),
        )
        steps = {
            int(m.group(1)): info.path
            for info in found
            if info.is_dir and (m := _MAP_DIR.match(info.path))
        }
        title = f"{self.name or self.run_id}: reasoning maps"
        if not steps:
            return display.Gallery(title, note="the run logged no reasoning maps")
        chosen = max(steps) if step is None else step
        if chosen not in steps:
            raise ValueError(
                f"run {self.name or self.run_id} has no maps at step {step}; it logged maps at "
                f"steps {', '.join(map(str, sorted(steps)))}"
            )
        with tempfile.TemporaryDirectory(prefix="sarl-maps-") as tmp, mlflow_bars_off():
            local = guarded(
                self.tracking_uri,
                f"downloading the maps of run {self.run_id}",
                lambda: client.download_artifacts(self.run_id, steps[chosen], tmp),
            )
            files = sorted(Path(local).glob("*.png"))
            return display.Gallery.from_files(
                f"{title} at step {chosen}", [(f.stem, f) for f in files]
            )

    def spooled_line(self) -> str:
        """What to do about records MLflow had not taken at the end (empty when none)."""
        if not self.spooled:
            return ""
        return (
            f"tracking: {self.spooled} records still spooled in {self.spool_dir}; "
            f"send them with: sarl tracking flush {self.spool_dir}"
        )

    # -- rendering -------------------------------------------------------------------------------

    def _section(self) -> display.Section:
        what = f"{self.steps} steps"
        if self.already_finished:
            what += " (already finished: nothing trained)"
        elif self.resumed_from is not None:
            what += f" (resumed from step {self.resumed_from})"
        lines = [f"MLflow run {self.run_id} at {self.run_url or self.tracking_uri}"]
        if self.run_url is None:
            # The link opens MLflow's model-training layout (its UI defaults to GenAI).
            eid = self.experiment_id
            pages = [] if eid is None else [("this run", ui_url(LOCAL_UI, eid, self.run_id))]
            lines += browse_lines(self.tracking_uri, pages)
        lines.append(f"checkpoints: {self.checkpoint_uri}")
        if self.upload_pending:
            lines.append(
                f"the final checkpoint did not reach the store; it is kept at "
                f"{self.upload_pending}: upload it with `sarl run --local --resume`"
            )
        if self.spooled:
            lines.append(self.spooled_line())
        metrics = display.Table(
            "final metrics",
            ("metric", "value"),
            tuple((k, display.number(v)) for k, v in self.headline().items()),
            numeric=frozenset({1}),
            caption="" if self.final_metrics else "no metrics logged",
        )
        return display.Section(f"Run {self.name or self.run_id}: {what}", (metrics,), lines)


__all__ = ["HEADLINE_METRICS", "RunResult"]
