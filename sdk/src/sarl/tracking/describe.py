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
  prints (:func:`ui_url`).
- ``mlflow.note.content`` is the description of an experiment or a run (Markdown), shown on its
  page and in the runs table's "Description" column.
- Runs group and compare by params or tags (the runs table's "Group by", the compare view's
  parallel coordinates): each run of a Study gets params ``arm`` and ``seed``
  (:func:`study_run_params`) beside its tags of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

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
#: MLflow's limit on a tag value is 8,000 characters; descriptions stay far below it.
_MAX_DESCRIPTION = 4000

#: Where a person clicks to see a Study's arms (first in the experiment's description, which
#: MLflow shows above the runs table folded to two lines; and in the README).
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
    "EXPERIMENT_KIND_TAG",
    "MODEL_TRAINING_KIND",
    "NOTE_TAG",
    "UI_TRAINING_QUERY",
    "experiment_description",
    "experiment_tags",
    "missing_experiment_tags",
    "run_description",
    "study_description",
    "study_run_params",
    "ui_url",
]
