"""Write (or ``--check``) the files generated from the typed settings models.

Called by ``make generate`` and ``make check-generated`` (CI). The Experiment model becomes
``experiment.schema.json`` (for editors: YAML language servers read it), each registered reward's
Settings model ``rewards/<name>.schema.json``, beside this file, and, in a repository checkout,
the Experiment and Study CRDs of the platform chart (``charts/sarl-platform/crds/``); the Study
model becomes ``study.schema.json``.

The CRD's ``openAPIV3Schema`` is the pydantic JSON schema of ``ExperimentSpec`` made *structural*
as Kubernetes requires (apiextensions.k8s.io/v1): every ``$ref`` inlined, every node typed, no
``title``/``$id``/``const``, ``anyOf [X, null]`` as ``X`` + ``nullable``, draft 2020-12 numeric
``exclusiveMinimum`` as OpenAPI 3.0's ``minimum`` + boolean ``exclusiveMinimum``, and
``dict[str, Any]`` as ``x-kubernetes-preserve-unknown-fields``. A construct with no structural
equivalent raises :class:`CRDSchemaError` naming the field, so a model change cannot silently
produce a CRD the API server would refuse.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.registry import get_reward_class, reward_names

HERE = Path(__file__).resolve().parent
# sdk/src/sarl/schemas -> repository root (only meaningful in a checkout, e.g. an editable install)
REPO_ROOT = HERE.parents[3]
CRD_DIR = REPO_ROOT / "charts" / "sarl-platform" / "crds"
CRD_PATH = CRD_DIR / "experiments.sarl.dev.yaml"
STUDY_CRD_PATH = CRD_DIR / "studies.sarl.dev.yaml"

GROUP: Final = "sarl.dev"
VERSION: Final = "v1alpha1"
JSONSchema = dict[str, Any]

# Keywords a structural schema may carry as they are (value validations and documentation).
_KEEP: Final = frozenset(
    {
        "description",
        "type",
        "format",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "multipleOf",
        "required",
        "nullable",
    }
)
# Dropped on purpose: ``title`` is noise in `kubectl explain`; ``default`` would make the API
# server materialise every default into the stored object, which would mask the preset that
# ``ExperimentSpec`` merges under the user's fields (defaults are applied by pydantic instead).
_DROP: Final = frozenset({"title", "default", "$id", "$schema", "examples"})
# A recursive model would inline forever; a CRD schema cannot express recursion anyway.
_MAX_DEPTH: Final = 32


class CRDSchemaError(ValueError):
    """A JSON-schema construct has no structural (Kubernetes CRD) equivalent."""


class ExperimentCondition(BaseModel):
    """One entry of status.conditions, shaped like a Kubernetes metav1.Condition."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(
        description="Condition type: the training job's (Created, Running, Succeeded, Failed...) "
        "or the operator's (Ready, TrackingReady, Evaluated, Admitted...)."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the type holds.")
    reason: str | None = Field(default=None, description="CamelCase reason of the last change.")
    message: str | None = Field(default=None, description="Human-readable detail.")
    lastTransitionTime: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When status last changed (RFC 3339).",
    )
    observedGeneration: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was set for."
    )


# The status is written by the operator, never by users, so it is not part of sarl.spec (the
# user-facing document); it is declared here, next to the CRD it shapes, until the operator that
# writes it lands and can own it. Docstrings become CRD descriptions (`kubectl explain`).
class ExperimentStatus(BaseModel):
    """What the operator reports on an Experiment (status subresource; users never write it)."""

    model_config = ConfigDict(extra="forbid")

    phase: Literal["Pending", "Queued", "Running", "Succeeded", "Failed"] | None = Field(
        default=None,
        description="Pending until the training job runs; Queued while it is suspended waiting "
        "for Kueue to admit it (condition Admitted says why); Running; Succeeded or Failed.",
    )
    conditions: list[ExperimentCondition] = Field(
        default_factory=list,
        description="The latest observation of each condition type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observedGeneration: int | None = Field(
        default=None, ge=0, description="metadata.generation the status describes."
    )
    mlflowRunUrl: str | None = Field(default=None, description="MLflow UI URL of the run.")
    mlflowRunId: str | None = Field(
        default=None,
        description="MLflow run the training job logs into (MLFLOW_RUN_ID); reused on reconcile.",
    )
    jobKind: Literal["TrainJob", "PyTorchJob"] | None = Field(
        default=None,
        description="Kind of the training job: Kubeflow Trainer v2 TrainJob or Training Operator "
        "PyTorchJob (spec.resources.job_kind; 'auto' resolved once and kept for the run).",
    )
    checkpointUri: str | None = Field(default=None, description="Last complete checkpoint.")
    lastStep: int | None = Field(default=None, ge=0, description="Last finished training step.")
    lastReward: float | None = Field(default=None, description="Mean reward of that step.")


def _resolve(node: JSONSchema, defs: JSONSchema, path: str) -> JSONSchema:
    """Inline a ``$ref`` (siblings such as ``description`` win over the target's keys)."""
    ref = node["$ref"]
    prefix = "#/$defs/"
    if not isinstance(ref, str) or not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise CRDSchemaError(f"{path}: unresolvable $ref {ref!r}")
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    return {**defs[ref[len(prefix) :]], **siblings}


def _without_null(node: JSONSchema, path: str) -> JSONSchema:
    """``anyOf: [X, {type: null}]`` (pydantic's ``X | None``) -> ``X`` with ``nullable: true``."""
    variants = node["anyOf"]
    non_null = [v for v in variants if v != {"type": "null"}]
    if len(non_null) != 1:
        raise CRDSchemaError(
            f"{path}: anyOf with {len(non_null)} non-null alternatives has no structural form"
        )
    outer = {k: v for k, v in node.items() if k != "anyOf"}
    merged = {**non_null[0], **outer}
    if len(non_null) < len(variants):
        merged["nullable"] = True
    return merged


def _map_values(schema: object, defs: JSONSchema, path: str) -> JSONSchema:
    """Schema of the values of a ``dict[str, X]``."""
    if not isinstance(schema, dict):
        raise CRDSchemaError(f"{path}: additionalProperties must be a bool or a schema")
    return structural(schema, defs, f"{path}.*")


def structural(node: JSONSchema, defs: JSONSchema, path: str = "spec") -> JSONSchema:
    """Convert one pydantic JSON-schema node (and its children) into a structural schema."""
    if path.count(".") + path.count("[") > _MAX_DEPTH:
        raise CRDSchemaError(f"{path}: nested too deep (a recursive model?)")
    while "$ref" in node or "anyOf" in node:
        node = _resolve(node, defs, path) if "$ref" in node else _without_null(node, path)
    out: JSONSchema = {}
    for key, value in node.items():
        if key in _DROP or key == "properties" or key == "items":
            continue
        if key in _KEEP or key.startswith("x-kubernetes-"):
            out[key] = value
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            # draft 2020-12 number -> OpenAPI 3.0 bound + boolean flag
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out[key] = _map_values(value, defs, path)
            # False: unknown fields are pruned by the API server (kubectl's default strict field
            # validation rejects them) and refused by pydantic; CRDs cannot combine it with
            # `properties`.
        else:
            raise CRDSchemaError(f"{path}: JSON-schema keyword {key!r} has no structural form")
    if "properties" in node:
        out["properties"] = {
            name: structural(child, defs, f"{path}.{name}")
            for name, child in node["properties"].items()
        }
    if "items" in node:
        out["items"] = structural(node["items"], defs, f"{path}[]")
    if "type" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        raise CRDSchemaError(f"{path}: every node of a structural schema needs a type")
    if isinstance(out.get("type"), list):
        raise CRDSchemaError(f"{path}: a structural schema has one type per node")
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True  # a free-form object, e.g. settings
    return _ordered(out)


class StudyStatus(BaseModel):
    """What the operator reports on a Study (status subresource; users never write it)."""

    model_config = ConfigDict(extra="forbid")

    phase: Literal["Pending", "Running", "Succeeded", "Failed"] | None = Field(
        default=None,
        description="Running while any arm x seed Experiment is not finished; Succeeded when "
        "all finished and the report was logged; Failed when the spec is invalid or every run "
        "of some arm failed.",
    )
    conditions: list[ExperimentCondition] = Field(
        default_factory=list,
        description="The latest observation of each condition type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observedGeneration: int | None = Field(
        default=None, ge=0, description="metadata.generation the status describes."
    )
    total: int | None = Field(default=None, ge=0, description="Arm x seed runs of the Study.")
    pending: int | None = Field(default=None, ge=0, description="Runs not yet started.")
    running: int | None = Field(default=None, ge=0, description="Runs in progress.")
    succeeded: int | None = Field(default=None, ge=0, description="Runs that succeeded.")
    failed: int | None = Field(default=None, ge=0, description="Runs that failed.")
    mlflowParentRunId: str | None = Field(
        default=None, description="MLflow parent run; every arm x seed run nests under it."
    )
    mlflowRunUrl: str | None = Field(default=None, description="MLflow UI URL of the parent run.")
    reportUri: str | None = Field(
        default=None, description="Where the report (summary.json, report.md, curves.png) is."
    )


def _ordered(node: JSONSchema) -> JSONSchema:
    """``type`` and ``description`` first, children last: the CRD reads top-down."""
    head = [k for k in ("type", "description") if k in node]
    tail = [k for k in ("required", "properties", "items", "additionalProperties") if k in node]
    middle = sorted(k for k in node if k not in head and k not in tail)
    return {k: node[k] for k in [*head, *middle, *tail]}


def _model_schema(model: type[BaseModel], path: str) -> JSONSchema:
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return structural(schema, defs, path)


def _spec_schema(model: type[BaseModel]) -> JSONSchema:
    schema = model.model_json_schema()
    defs = schema["$defs"]
    return structural(schema["properties"]["spec"], defs, "spec")


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    description: str,
    spec: JSONSchema,
    status: type[BaseModel],
    columns: list[tuple[str, str, str]],
) -> JSONSchema:
    open_api: JSONSchema = {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": _model_schema(status, "status"),
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {
                "app.kubernetes.io/name": "sarl",
                "app.kubernetes.io/part-of": "sarl",
                "app.kubernetes.io/component": "crd",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["sarl"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": open_api},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": name, "type": kind_, "jsonPath": json_path}
                        for name, kind_, json_path in columns
                    ],
                }
            ],
        },
    }


def crd() -> JSONSchema:
    """The Experiment CustomResourceDefinition (apiextensions.k8s.io/v1) as a dict."""
    from sarl.spec.experiment import Experiment

    return _crd(
        kind="Experiment",
        plural="experiments",
        short_names=["sexp"],
        description="A structure-aware RL training experiment (sarl.spec.experiment).",
        spec=_spec_schema(Experiment),
        status=ExperimentStatus,
        columns=[
            ("Phase", "string", ".status.phase"),
            ("Step", "integer", ".status.lastStep"),
            ("Reward", "number", ".status.lastReward"),
            ("MLflow", "string", ".status.mlflowRunUrl"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ],
    )


def study_crd() -> JSONSchema:
    """The Study CustomResourceDefinition: arms x seeds of one base Experiment."""
    from sarl.spec.study import Study

    return _crd(
        kind="Study",
        plural="studies",
        short_names=["sstudy"],
        description="Arms x seeds of one base Experiment, compared in one report "
        "(sarl.spec.study).",
        spec=_spec_schema(Study),
        status=StudyStatus,
        columns=[
            ("Phase", "string", ".status.phase"),
            ("Total", "integer", ".status.total"),
            ("Running", "integer", ".status.running"),
            ("Succeeded", "integer", ".status.succeeded"),
            ("Failed", "integer", ".status.failed"),
            ("MLflow", "string", ".status.mlflowRunUrl"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ],
    )


def crd_yaml(doc: JSONSchema | None = None, source: str = "sarl.spec.experiment.Experiment") -> str:
    """A CRD file's content: a do-not-edit header and the CRD as block YAML."""
    header = (
        "# GENERATED by `make generate` (python -m sarl.schemas.generate) from\n"
        f"# {source}: do not edit; change the pydantic model instead.\n"
    )
    body = yaml.safe_dump(
        crd() if doc is None else doc, sort_keys=False, width=100, allow_unicode=True
    )
    return header + body


def rendered() -> dict[Path, str]:
    """Map of file path -> expected content."""
    from sarl.spec.experiment import Experiment

    files: dict[Path, str] = {}
    schema = Experiment.model_json_schema()
    schema["$id"] = "https://sarl.dev/schemas/experiment.schema.json"
    files[HERE / "experiment.schema.json"] = json.dumps(schema, indent=2) + "\n"
    from sarl.spec.study import Study

    schema = Study.model_json_schema()
    schema["$id"] = "https://sarl.dev/schemas/study.schema.json"
    files[HERE / "study.schema.json"] = json.dumps(schema, indent=2) + "\n"
    for name in reward_names():
        schema = get_reward_class(name).Settings.model_json_schema()
        schema["$id"] = f"https://sarl.dev/schemas/rewards/{name}.schema.json"
        files[HERE / "rewards" / f"{name}.schema.json"] = json.dumps(schema, indent=2) + "\n"
    files.update(crd_files())
    return files


def crd_files() -> dict[Path, str]:
    """The CRD file, in a repository checkout only (an installed sdk has no charts/ beside it)."""
    if not CRD_PATH.parent.parent.is_dir():
        return {}
    return {
        CRD_PATH: crd_yaml(),
        STUDY_CRD_PATH: crd_yaml(study_crd(), "sarl.spec.study.Study"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if files are out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, content in rendered().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == content:
            continue
        if args.check:
            stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        for path in stale:
            print(f"out of date: {path} (run `make generate`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
