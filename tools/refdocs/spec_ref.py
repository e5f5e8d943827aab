"""reference/spec.md and reference/rewards.md: every Experiment and Study field, each reward's
settings.

Read from the JSON schemas ``make generate`` writes from the pydantic models
(``sarl.spec.experiment.Experiment``, ``sarl.spec.study.Study``, each registered reward's
``Settings``), computed afresh here rather than read from the files so the page cannot lag
behind the models. A field without a description is listed as missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tools.refdocs.markdown import code, literal, page, table
from tools.refdocs.schema_rows import Row, Schema, missing, rows

if TYPE_CHECKING:
    from sarl.rewards.base import Reward

HEADERS = ("Field", "Type", "Default", "Description")


def _default(row: Row) -> str:
    if row.required:
        return "required"
    return literal(row.default) if row.has_default else ""


def field_table(found: Iterable[Row]) -> str:
    """The table of ``found`` rows: path as code, type, default (or *required*), description."""
    return table(HEADERS, ((code(r.path), r.type, _default(r), r.description) for r in found))


def _group(path: str) -> str:
    """The section a field belongs to: ``spec.model`` for ``spec.model.tiny.hidden_size``."""
    parts = path.split(".")
    return ".".join(parts[:2]) if parts[0] == "spec" and len(parts) > 1 else parts[0]


def grouped(found: list[Row], level: str = "###") -> list[str]:
    """One sub-section per top-level field of ``spec`` (rows come depth first, so contiguous)."""
    sections: list[str] = []
    current: list[Row] = []
    for row in found:
        if current and _group(row.path) != _group(current[0].path):
            sections.append(f"{level} `{_group(current[0].path)}`\n\n{field_table(current)}")
            current = []
        current.append(row)
    if current:
        sections.append(f"{level} `{_group(current[0].path)}`\n\n{field_table(current)}")
    return sections


def _schemas() -> tuple[Schema, Schema]:
    from sarl.spec.experiment import Experiment
    from sarl.spec.study import Study

    return Experiment.model_json_schema(), Study.model_json_schema()


def spec_page() -> tuple[str, list[str]]:
    """The page and the Experiment/Study fields without a description."""
    experiment_schema, study_schema = _schemas()
    experiment = rows(experiment_schema)
    # A Study's spec.base is an Experiment spec: listed once, in the Experiment's section.
    study = [r for r in rows(study_schema) if not r.path.startswith("spec.base.")]
    intro = (
        "Every field of the two documents sarl takes, `Experiment` (`sarl run`, `sarl submit`, "
        "the Experiment CRD) and `Study` (`sarl study run`, the Study CRD), with its type, "
        "default and description. Editors validate the same fields with the JSON schemas in "
        "`sdk/src/sarl/schemas/` (`experiment.schema.json`, `study.schema.json`). Each reward's "
        "`settings` are in [Reward settings](rewards.md)."
    )
    sections = [
        "## Experiment\n\n`apiVersion: sarl.dev/v1alpha1`, `kind: Experiment`.",
        *grouped(experiment),
        "## Study\n\n`apiVersion: sarl.dev/v1alpha1`, `kind: Study`. `spec.base` takes every "
        "field of an Experiment's `spec` (above); each arm's `override` is merged over it.",
        *grouped(study),
    ]
    found = missing(experiment, "Experiment") + missing(study, "Study")
    return page("Experiment and Study fields", intro, sections), found


def shipped_rewards() -> dict[str, type[Reward]]:
    """The rewards sarl ships, by name: not those an installed package adds (entry points, e.g.
    examples/custom_reward) or a process registers at run time (a test's), which would make the
    page depend on the machine or on which tests ran before."""
    from sarl.rewards.registry import get_reward_class, installed_rewards, reward_names

    added = installed_rewards()
    classes = {name: get_reward_class(name) for name in reward_names() if name not in added}
    return {n: c for n, c in classes.items() if c.__module__.startswith("sarl.rewards.")}


def rewards_page() -> tuple[str, list[str]]:
    """The page and the reward settings without a description."""
    from sarl.rewards.registry import reward_summary

    sections: list[str] = []
    found: list[str] = []
    for name, cls in shipped_rewards().items():
        settings = rows(cls.Settings.model_json_schema())
        found += missing(settings, f"reward {name}")
        body = field_table(settings) if settings else "No settings."
        sections.append(f"## `{name}`\n\n{reward_summary(name)}\n\n{body}")
    intro = (
        "Each registered reward, by the name a spec's `spec.reward[].name` gives, with the "
        "`settings` it takes (`sarl rewards` lists the same names). Unknown settings are "
        "errors. Editors validate them with `sdk/src/sarl/schemas/rewards/<name>.schema.json`."
    )
    return page("Reward settings", intro, sections), found
