"""Typed model of the Study document: arms x seeds of one base Experiment, as one document.

A Study (``apiVersion: sarl.dev/v1alpha1``, ``kind: Study``) names a base Experiment spec (inline
fields and/or a preset), named ``arms`` that each override some of its fields, the ``seeds`` every
arm runs with, how many runs may go at once (``parallelism``) and the ``reference`` arm the others
are compared with (paired over seeds). :meth:`Study.runs` expands it into one validated
:class:`~sarl.spec.experiment.Experiment` per arm x seed; that expansion is the one place the
naming, labels and MLflow tags of a Study's runs are decided.

Read by the loader (``load_study``), the local Study runner (``sarl study run --local``), the
operator (one Experiment per arm x seed, owned by the Study), the report and the schema
generator (JSON schema, Study CRD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from sarl.spec.experiment import (
    _DNS1123,
    API_VERSION,
    Experiment,
    ExperimentSpec,
    Metadata,
    _explicit,
)
from sarl.spec.presets import deep_merge
from sarl.spec.secrets import (
    REDACTED,
    SecretInSpecError,
    describe_value,
    join_path,
    redact,
    refuse_secrets,
    scrub_values,
)
from sarl.spec.strict import _Strict
from sarl.spec.suggest import NO_VALUE, hint_for, path, with_hint

STUDY_KIND: Final = "Study"
#: Labels every run of a Study carries (Kubernetes objects and the Experiment's metadata).
LABEL_STUDY: Final = "sarl.dev/study"
LABEL_ARM: Final = "sarl.dev/arm"
LABEL_SEED: Final = "sarl.dev/seed"
#: MLflow tags of a Study's runs: ``mlflow.parentRunId`` nests them under the Study's parent run
#: (MLflow's UI groups nested runs natively); ``arm`` and ``seed`` are what the report groups by.
TAG_PARENT: Final = "mlflow.parentRunId"
TAG_STUDY: Final = "sarl.study"
TAG_ARM: Final = "arm"
TAG_SEED: Final = "seed"
TAG_ROLE: Final = "sarl.role"  # "study" on the parent run, "arm" on the runs
#: The run tag MLflow's UI colours a run by in its runs table and chart view (MLflow 3.17.2's UI
#: bundle, mlflow/server/js/build/static/js/main.*.js: the run-colour reducer reads tag
#: ``mlflow.runColor`` of every run it loads, and the colour picker writes it). Every seed of an
#: arm gets the arm's colour, so the chart view tells arms apart (issue 40 item 4).
TAG_COLOR: Final = "mlflow.runColor"
#: One colour per arm, in the arms' order: Okabe & Ito's colour-blind-safe palette ("Color
#: Universal Design", 2008), blue and orange first (the pair most viewers tell apart), yellow
#: last (faint on white). The report's curves.png uses the same colours (sarl.study.plot).
ARM_COLORS: Final = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow
)


#: The Study's parent run: grey, so that no arm is mistaken for it in the chart view (MLflow's
#: own colour for an untagged run is a blue close to the first arm's).
STUDY_COLOR: Final = "#999999"


def parent_run_tags(study: str) -> dict[str, str]:
    """The MLflow tags of a Study's parent run (local runner and operator alike): its role, the
    Study's name and :data:`STUDY_COLOR`."""
    return {TAG_ROLE: "study", TAG_STUDY: study, TAG_COLOR: STUDY_COLOR}


def arm_color(index: int) -> str:
    """The colour of the arm at ``index`` in the Study's arms (the palette repeats after 8)."""
    return ARM_COLORS[index % len(ARM_COLORS)]


class StudyFieldError(ValueError):
    """A Study field is invalid; ``loc`` is the field's path from the document root."""

    def __init__(self, loc: str, value: Any, message: str) -> None:
        self.loc = loc
        self.value = value
        self.message = message
        shown = self.shown()
        super().__init__(f"{loc}{shown}: {scrub_values(message, value)}")

    def shown(self) -> str:
        """``=<value>`` as a message may show it (nothing for :data:`NO_VALUE`)."""
        if self.value is NO_VALUE:
            return ""
        return f"={describe_value(redact(self.value, self.loc.rsplit('.', 1)[-1]))}"


class StudyArm(_Strict):
    """One arm: a name and the Experiment fields it changes from the Study's base."""

    name: str = Field(
        description="Arm name (DNS-1123 label, e.g. 'ground-truth', 'sarl'): names the arm's "
        "runs '<study>-<arm>-s<seed>' and their MLflow 'arm' tag."
    )
    description: str | None = Field(default=None, description="What this arm tests (report).")
    override: dict[str, Any] = Field(
        default_factory=dict,
        description="Experiment spec fields merged over the base (nested mappings merge, lists "
        "such as `reward` replace). Not `preset` (set it in the base) nor `algorithm.seed` "
        "(set by `seeds`).",
    )

    @field_validator("name")
    @classmethod
    def _dns(cls, v: str) -> str:
        if len(v) > 40 or not _DNS1123.match(v):
            raise ValueError(
                "must be a DNS-1123 label of at most 40 characters (lowercase letters, digits, "
                "'-'), so '<study>-<arm>-s<seed>' stays a valid Kubernetes name"
            )
        return v

    @field_validator("override")
    @classmethod
    def _no_preset_or_seed(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "preset" in v:
            raise ValueError(
                "an arm cannot change the preset (it would silently keep the base's resolved "
                "fields); set the preset in spec.base and override the fields that differ"
            )
        algorithm = v.get("algorithm")
        if isinstance(algorithm, dict) and "seed" in algorithm:
            raise ValueError("algorithm.seed is set per run by spec.seeds, not by an arm")
        return v


class StudySpec(_Strict):
    """A base Experiment spec, the arms that override it, and the seeds every arm runs."""

    base: ExperimentSpec = Field(
        description="The Experiment spec every arm starts from (inline fields and/or a preset)."
    )
    arms: list[StudyArm] = Field(min_length=1, description="Named arms, each an override.")
    seeds: list[int] = Field(
        default_factory=lambda: [0, 1, 2],
        min_length=1,
        description="Every arm runs once per seed (algorithm.seed); seeds pair runs across arms.",
    )
    parallelism: int | None = Field(
        default=None,
        ge=1,
        description="At most this many runs at once (cluster: Experiments running; local: "
        "processes, overridden by `sarl study run -j`). Default: cluster all, local 1.",
    )
    reference: str | None = Field(
        default=None,
        description="Arm the others are compared with (paired differences over seeds); "
        "default: the first arm.",
    )

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        dupes = sorted({s for s in v if v.count(s) > 1})
        if dupes:
            raise ValueError(f"duplicate seeds {dupes}: each seed runs once per arm")
        if any(s < 0 for s in v):
            raise ValueError("seeds must be >= 0")
        return v

    @model_validator(mode="after")
    def _arms_consistent(self) -> StudySpec:
        names = [a.name for a in self.arms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise StudyFieldError("spec.arms", dupes, "duplicate arm names")
        if self.reference is not None and self.reference not in names:
            raise StudyFieldError(
                "spec.reference", self.reference, f"is not an arm; arms: {', '.join(names)}"
            )
        for i, arm in enumerate(self.arms):
            arm_spec(self.base, arm, index=i)  # raises StudyFieldError naming the field
        return self

    @property
    def reference_arm(self) -> str:
        return self.reference or self.arms[0].name


def _lookup(tree: Any, loc: tuple[Any, ...]) -> bool:
    """Whether the path ``loc`` (or a prefix naming a key) exists in the override ``tree``."""
    node = tree
    for part in loc:
        if (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        ):
            node = node[part]
        else:
            return False
    return True


def arm_spec(base: ExperimentSpec, arm: StudyArm, *, index: int) -> ExperimentSpec:
    """The base spec with ``arm.override`` merged over it, validated.

    Errors name the field in the document: ``spec.arms[i].override.<path>`` when the bad value
    is the arm's own, ``spec.arms[i] (base + override).<path>`` when only the combination fails.
    """
    merged = deep_merge(_explicit(base), arm.override)
    try:
        return ExperimentSpec.model_validate(merged)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(first["loc"])
        own = _lookup(arm.override, loc) or (
            first["type"] in ("extra_forbidden", "missing") and _lookup(arm.override, loc[:-1])
        )
        where = f"spec.arms[{index}].override" if own else f"spec.arms[{index}] (base + override)"
        msg = str(first["msg"]).removeprefix("Value error, ")
        ctx = (first.get("ctx") or {}).get("error")
        if isinstance(ctx, SecretInSpecError):  # Study._no_secrets catches documents first
            raise StudyFieldError(join_path(where, ctx.finding.path), REDACTED, ctx.reason) from e
        value = NO_VALUE if first["type"] == "missing" else first.get("input")
        field = getattr(ctx, "field", None)  # FieldError, RewardConfigError: the field inside
        if ctx is not None and isinstance(field, tuple):
            loc, value, msg = (*loc, *field), ctx.value, ctx.detail
        elif ctx is not None and not isinstance(ctx, str):
            msg = str(ctx)
        elif first["type"] == "extra_forbidden":
            msg, value = with_hint("unknown field", hint_for(first, ExperimentSpec)), NO_VALUE
        else:
            msg = with_hint(msg, hint_for(first, ExperimentSpec))
        raise StudyFieldError(join_path(where, path(loc)), value, msg) from e


@dataclass(frozen=True)
class StudyRun:
    """One arm x seed of a Study, as the Experiment that runs it."""

    arm: str
    seed: int
    experiment: Experiment

    @property
    def name(self) -> str:
        return self.experiment.name


class Study(_Strict):
    """Arms x seeds of one base Experiment, compared in one report (sarl.spec.study)."""

    apiVersion: Literal["sarl.dev/v1alpha1"] = Field(
        default=API_VERSION, description="Always sarl.dev/v1alpha1."
    )
    kind: Literal["Study"] = Field(default=STUDY_KIND, description="Always Study.")
    metadata: Metadata
    spec: StudySpec

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        """Refuse credentials anywhere in the document, the base and every arm's override
        included (sarl.spec.secrets), before any field is validated."""
        refuse_secrets(data)
        return data

    @model_validator(mode="after")
    def _names_fit(self) -> Study:
        longest = max(
            len(run_name(self.name, a.name, s)) for a in self.spec.arms for s in self.spec.seeds
        )
        if longest > 63:
            raise StudyFieldError(
                "metadata.name",
                self.name,
                f"'<study>-<arm>-s<seed>' reaches {longest} characters (at most 63, a "
                "Kubernetes name); shorten the Study or arm names",
            )
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def mlflow_experiment(self) -> str:
        """The MLflow experiment of the parent run and every arm x seed run (nesting needs one)."""
        return self.spec.base.tracking.experiment_name or self.name

    def runs(self, parent_run_id: str | None = None) -> list[StudyRun]:
        """One Experiment per arm x seed, seed-major (every arm of seed 0, then seed 1...).

        Each is named ``<study>-<arm>-s<seed>``, labelled with the study, arm and seed, logs to
        the MLflow experiment named after the Study (so its runs can nest under the Study's
        parent run, ``parent_run_id``) with tags ``arm``, ``seed``, ``sarl.study`` and the arm's
        colour in MLflow's UI (:data:`TAG_COLOR`, one per arm, see :func:`arm_color`).
        """
        out: list[StudyRun] = []
        for seed in self.spec.seeds:
            for i, arm in enumerate(self.spec.arms):
                out.append(StudyRun(arm.name, seed, self._experiment(arm, i, seed, parent_run_id)))
        return out

    def _experiment(
        self, arm: StudyArm, index: int, seed: int, parent_run_id: str | None
    ) -> Experiment:
        spec = arm_spec(self.spec.base, arm, index=index)
        tags = {
            TAG_COLOR: arm_color(index),  # a colour the spec sets itself wins
            **spec.tracking.tags,
            TAG_STUDY: self.name,
            TAG_ARM: arm.name,
            TAG_SEED: str(seed),
            TAG_ROLE: "arm",
        }
        if parent_run_id:
            tags[TAG_PARENT] = parent_run_id
        data = deep_merge(
            _explicit(spec),
            {
                "algorithm": {"seed": seed},
                "tracking": {
                    "experiment_name": self.mlflow_experiment,
                    "tags": tags,
                },
            },
        )
        labels = {
            **self.metadata.labels,
            LABEL_STUDY: self.name,
            LABEL_ARM: arm.name,
            LABEL_SEED: str(seed),
        }
        return Experiment(
            metadata=Metadata(
                name=run_name(self.name, arm.name, seed),
                namespace=self.metadata.namespace,
                labels=labels,
            ),
            spec=ExperimentSpec.model_validate(data),
        )


def run_name(study: str, arm: str, seed: int) -> str:
    """The name of one arm x seed run: ``<study>-<arm>-s<seed>``."""
    return f"{study}-{arm}-s{seed}"


def is_study_document(data: Any) -> bool:
    """Whether a raw document declares ``kind: Study`` (the CLI dispatches on it)."""
    return isinstance(data, dict) and data.get("kind") == STUDY_KIND
