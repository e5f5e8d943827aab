"""How sarl's experiments and runs read in MLflow's UI: experiment kind, descriptions, arm params.

Called by :meth:`sarl.tracking.tracker.Tracker.start` (the tags of an experiment it creates or
first meets, the run's description), by the local runner and the TRL job (a run's description
and, in a Study, its ``arm``/``seed`` params), by the Study runner (the parent run's
description) and by the operator (the same tags on the experiments and runs it creates over
MLflow's REST API). Pure functions and constants: no MLflow import.

What MLflow 3.17.2 does with them (read in its UI bundle, ``mlflow/server/js/build/static/js``):

- ``mlflow.experimentKind`` is the tag the UI reads as an experiment's kind;
  ``custom_model_development`` is "Machine learning" (model training), ``genai_development``
  "GenAI apps & agents" (``ExperimentKind`` in ``main.*.js``). In 3.17.2 a feature flag that is
  on in the open-source build makes the UI decide the layout from a global switch instead of the
  tag ("GenAI | Model training" at the top of the sidebar, remembered by the browser, default
  GenAI); the query parameter ``workflowType=machine_learning`` sets it for the page it opens.
  So sarl sets the tag (the UI's code path for it is still there, taken when that flag is off,
  and tools list experiments by it) *and* puts :data:`UI_TRAINING_QUERY` on every UI link it
  prints (:func:`ui_url`). Where a Study's arms are compared, the link adds
  :data:`CHART_VIEW_QUERY` (:func:`chart_url`); the arms' colours there are run tags
  (``sarl.spec.study.TAG_COLOR``).
- ``mlflow.note.content`` is the description of an experiment or a run (Markdown), shown on its
  page and in the runs table's "Description" column.
- Runs group and compare by params or tags (the runs table's "Group by", the compare view's
  parallel coordinates): each run of a Study gets params ``arm`` and ``seed``
  (:func:`study_run_params`) beside its tags of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from sarl.spec.study import TAG_ARM, TAG_ROLE, TAG_SEED, TAG_STUDY

if TYPE_CHECKING:
    from sarl.spec.experiment import Experiment
    from sarl.spec.study import Study

#: The experiment tag MLflow's UI reads as the experiment's kind, and sarl's value for it.
EXPERIMENT_KIND_TAG: Final = "mlflow.experimentKind"
MODEL_TRAINING_KIND: Final = "custom_model_development"
#: The description of an experiment or a run in MLflow (Markdown).
NOTE_TAG: Final = "mlflow.note.content"
#: Opens a page of MLflow's UI (3.17) in its model-training layout (see the module docstring).
UI_TRAINING_QUERY: Final = "workflowType=machine_learning"
#: Opens an experiment's runs in the chart view: MLflow 3.17.2's experiment page reads its view
#: from the query parameter ``compareRunsMode`` (``TABLE`` by default; ``CHART``, ``ARTIFACT``;
#: hook ``useExperimentPageViewMode`` in ``mlflow/server/js/build/static/js/2809.*.chunk.js``).
CHART_VIEW_QUERY: Final = "compareRunsMode=CHART"
#: Where ``mlflow ui`` serves by default (``mlflow ui --help``: host 127.0.0.1, port 5000).
LOCAL_UI: Final = "http://127.0.0.1:5000"
#: MLflow's limit on a tag value is 8,000 characters; descriptions stay far below it.
_MAX_DESCRIPTION = 4000

#: Where a person clicks to see a Study's arms (first in the experiment's description, which
#: MLflow shows above the runs table folded to two lines; and in
#: docs/getting-started/report-and-mlflow.md).
ARMS_HOWTO: Final = (
    "**See the arms:** Group by → `arm` (above the table), or expand the Study's parent row "
    "(+ before its name); the chart view (second icon) then draws one line per arm, the mean "
    "over seeds with its min-max band. Tick runs and press Compare for parallel coordinates "
    "over `arm` and `seed`."
)


def ui_url(base: str, experiment_id: str, run_id: str | None = None) -> str:
    """The MLflow UI page of an experiment (its runs) or of one run, in the training layout:
    ``<base>/#/experiments/<eid>/runs[/<rid>]?workflowType=machine_learning``."""
    page = f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs"
    return f"{page}/{run_id}?{UI_TRAINING_QUERY}" if run_id else f"{page}?{UI_TRAINING_QUERY}"


def chart_url(base: str, experiment_id: str) -> str:
    """The experiment's runs in MLflow's chart view (one line per run, in its arm's colour):
    :func:`ui_url` plus :data:`CHART_VIEW_QUERY`."""
    return f"{ui_url(base, experiment_id)}&{CHART_VIEW_QUERY}"


def ui_base(tracking_uri: str) -> str | None:
    """Where MLflow's UI for ``tracking_uri`` is: the server itself (``http(s)://``), or
    :data:`LOCAL_UI` where ``mlflow ui`` serves a local SQLite store; ``None`` for other stores."""
    scheme = urlsplit(tracking_uri).scheme
    if scheme in ("http", "https"):
        return tracking_uri.rstrip("/")
    return LOCAL_UI if scheme == "sqlite" else None


def browse_lines(tracking_uri: str, pages: Sequence[tuple[str, str]]) -> list[str]:
    """How to see runs in MLflow's UI: for a local SQLite store first the ``mlflow ui`` command
    that serves it, then one ``[then] open <url> (<what>)`` line per page (``pages``: what it
    shows and its URL under :func:`ui_base`). Empty for a store without a UI (a ``file:`` store).

    Called by the summaries of a local run and of a local Study, so both print one format."""
    if ui_base(tracking_uri) is None:
        return []
    lines = []
    lead = "open"
    if tracking_uri.startswith("sqlite:"):
        lines.append(f"browse it: mlflow ui --backend-store-uri {tracking_uri}")
        lead = "then open"
    return lines + [f"{lead} {url} ({what})" for what, url in pages]


def experiment_tags(description: str) -> dict[str, str]:
    """The tags sarl gives an MLflow experiment: its kind (model training) and description."""
    return {EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND, NOTE_TAG: _cut(description)}


def missing_experiment_tags(existing: Mapping[str, str], description: str) -> dict[str, str]:
    """The :func:`experiment_tags` an existing experiment lacks. A kind or a description it
    already has (someone chose it, e.g. in the UI) is kept."""
    return {k: v for k, v in experiment_tags(description).items() if not existing.get(k)}


def experiment_description(name: str, study: Study | None = None) -> str:
    """What the MLflow experiment ``name`` holds (set when sarl creates it): where to click to
    see a Study's arms first, then what the Study (or the experiment) is."""
    if study is not None:
        return _cut(f"{ARMS_HOWTO}\n\n{study_description(study)}")
    return _cut(
        f"{ARMS_HOWTO}\n\nsarl RL training runs of {name!r}: one MLflow run per training run "
        "(params: the resolved spec; metrics per step: reward/*, structure/*, accuracy, "
        "eval/heldout/*; reasoning maps under maps/step-*); a Study is one parent run with a "
        "nested run per arm x seed."
    )


def study_description(study: Study) -> str:
    """The description of a Study's parent run: the comparison, its arms and seeds."""
    spec = study.spec
    arms = "; ".join(
        f"**{arm.name}**"
        + (" (reference)" if arm.name == spec.reference else "")
        + (f" — {arm.description.strip().rstrip('.')}" if arm.description else "")
        for arm in spec.arms
    )
    seeds = ", ".join(str(s) for s in spec.seeds)
    return _cut(
        f"sarl Study {study.name!r}: {len(spec.arms)} arms x {len(spec.seeds)} seeds "
        f"(seeds {seeds}), one nested run per arm x seed (params and tags `arm`, `seed`). "
        f"Arms: {arms}. The report (summary.json, report.md, curves.png) is under report/."
    )


def run_description(exp: Experiment) -> str:
    """What one training run is: its arm and seed in a Study, algorithm, rewards, model, data."""
    spec = exp.spec
    tags = spec.tracking.tags
    algo = spec.algorithm
    steps = f"{algo.max_steps} steps" if algo.max_steps else f"{algo.epochs} epochs"
    rewards = ", ".join(f"{term.name} (weight {term.weight:g})" for term in spec.reward)
    task = spec.data.dataset if spec.data.task == "dataset" else spec.data.task
    what = (
        f"{algo.name.upper()} {steps}, {algo.rollouts_per_prompt} rollouts per prompt, "
        f"learning rate {algo.learning_rate:g}, seed {algo.seed}; reward: {rewards}; "
        f"model {spec.model.name}; data {task}."
    )
    if tags.get(TAG_ROLE) == "arm" and TAG_ARM in tags:
        head = f"Arm **{tags[TAG_ARM]}**, seed {tags.get(TAG_SEED, algo.seed)}"
        if TAG_STUDY in tags:
            head += f" of Study {tags[TAG_STUDY]!r}"
        return _cut(f"{head}. {what}")
    return _cut(f"Experiment {exp.name!r}: {what}")


def study_run_params(tags: Mapping[str, str]) -> dict[str, str]:
    """Params ``arm`` and ``seed`` of a Study's run (from its tags), so MLflow's Group by and
    parallel coordinates offer them; empty for a run outside a Study."""
    if tags.get(TAG_ROLE) != "arm":
        return {}
    return {key: str(tags[key]) for key in (TAG_ARM, TAG_SEED) if key in tags}


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 3] + "..."


__all__ = [
    "ARMS_HOWTO",
    "CHART_VIEW_QUERY",
    "EXPERIMENT_KIND_TAG",
    "LOCAL_UI",
    "MODEL_TRAINING_KIND",
    "NOTE_TAG",
    "UI_TRAINING_QUERY",
    "browse_lines",
    "chart_url",
    "experiment_description",
    "experiment_tags",
    "missing_experiment_tags",
    "run_description",
    "study_description",
    "study_run_params",
    "ui_base",
    "ui_url",
]
