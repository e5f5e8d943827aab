"""The Experiment and Study CRDs generated from the pydantic models (sarl.schemas.generate): up to
date, structural as Kubernetes requires, accepting every example Experiment (and Study) and
rejecting invalid ones exactly where the pydantic model does."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sarl.schemas import generate
from tests.charts.rendering import PLATFORM, REPO_ROOT, chart_crds

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
STUDY_EXAMPLES = sorted((REPO_ROOT / "examples" / "studies").glob("*.yaml"))
# JSON-schema keywords a structural CRD schema must not contain (apiextensions.k8s.io/v1).
FORBIDDEN = {
    "$ref",
    "$defs",
    "definitions",
    "$schema",
    "$id",
    "const",
    "title",
    "default",
    "anyOf",
    "oneOf",
    "allOf",
    "uniqueItems",
    "patternProperties",
    "additionalItems",
}


def _crd_named(name: str) -> dict[str, Any]:
    (found,) = [c for c in chart_crds(PLATFORM) if c["metadata"]["name"] == name]
    return found


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return _crd_named("experiments.sarl.dev")


@pytest.fixture(scope="module")
def study_schema() -> dict[str, Any]:
    (version,) = _crd_named("studies.sarl.dev")["spec"]["versions"]
    result: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return result


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    result: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return result


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}.*")


def _as_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 (as Kubernetes reads it) -> draft-4 JSON schema: `nullable` becomes a null
    alternative; draft 4 already reads `exclusiveMinimum` as a boolean like OpenAPI 3.0."""
    if isinstance(node, list):
        return [_as_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if out.pop("nullable", False):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema

    return jsonschema.Draft4Validator(_as_json_schema(schema))


def _example_documents() -> list[tuple[Path, dict[str, Any]]]:
    from sarl.spec.loader import load_experiment

    return [(p, load_experiment(p).model_dump(mode="json")) for p in EXAMPLES]


def test_crd_file_is_up_to_date() -> None:
    path = generate.CRD_PATH
    assert path.read_text(encoding="utf-8") == generate.crd_yaml(), (
        f"{path} drifted from sarl.spec.experiment: run `make generate`"
    )
    study = generate.STUDY_CRD_PATH
    assert study.read_text(encoding="utf-8") == generate.crd_files()[study], (
        f"{study} drifted from sarl.spec.study: run `make generate`"
    )
    assert set(generate.crd_files()) == {path, study}  # part of `generate --check`
    assert {c["metadata"]["name"] for c in chart_crds(PLATFORM)} == {
        "experiments.sarl.dev",
        "studies.sarl.dev",
    }


def test_crd_identity(crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "experiments.sarl.dev"
    assert spec["group"] == "sarl.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "experiments" and spec["names"]["kind"] == "Experiment"
    assert spec["names"]["shortNames"] == ["sexp"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Step", "Reward", "MLflow", "Age"]
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Step"]["type"] == "integer" and columns["Reward"]["type"] == "number"
    assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp"


def test_study_crd_identity() -> None:
    spec = _crd_named("studies.sarl.dev")["spec"]
    assert spec["group"] == "sarl.dev" and spec["scope"] == "Namespaced"
    assert (spec["names"]["plural"], spec["names"]["kind"]) == ("studies", "Study")
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for field in ("total", "pending", "running", "succeeded", "failed"):
        assert status[field]["type"] == "integer"
    for field in ("mlflowParentRunId", "mlflowRunUrl", "reportUri"):
        assert status[field]["type"] == "string"


@pytest.mark.parametrize("path", STUDY_EXAMPLES, ids=lambda p: p.name)
def test_study_crd_accepts_every_example_study(study_schema: dict[str, Any], path: Path) -> None:
    """What ``sarl submit`` stores for an example Study (its validated spec) fits the CRD."""
    from sarl.spec.loader import load_study

    document = load_study(path).model_dump(mode="json")
    errors = [e.message for e in _validator(study_schema).iter_errors(document)]
    assert not errors, f"{path.name}: {errors}"


@pytest.mark.parametrize("name", ["experiments.sarl.dev", "studies.sarl.dev"])
def test_schema_is_structural(name: str) -> None:
    (version,) = _crd_named(name)["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _nodes(schema):
        bad = FORBIDDEN & set(node)
        assert not bad, f"{path or '<root>'}: {sorted(bad)}"
        assert node.get("type") or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path


def test_status_schema(schema: dict[str, Any]) -> None:
    status = schema["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Queued", "Running", "Succeeded", "Failed"]
    for field, kind in [
        ("mlflowRunUrl", "string"),
        ("checkpointUri", "string"),
        ("lastStep", "integer"),
        ("lastReward", "number"),
    ]:
        assert status[field]["type"] == kind
    conditions = status["conditions"]
    assert conditions["type"] == "array"
    assert set(conditions["items"]["required"]) == {"type", "status"}


def test_free_form_settings_are_preserved(schema: dict[str, Any]) -> None:
    term = schema["properties"]["spec"]["properties"]["reward"]["items"]
    assert term["properties"]["settings"]["x-kubernetes-preserve-unknown-fields"] is True
    tolerations = schema["properties"]["spec"]["properties"]["resources"]["properties"][
        "tolerations"
    ]
    assert tolerations["items"]["x-kubernetes-preserve-unknown-fields"] is True


@pytest.mark.parametrize(
    ("path", "document"), _example_documents(), ids=lambda v: getattr(v, "name", "")
)
def test_accepts_every_example(
    schema: dict[str, Any], path: Path, document: dict[str, Any]
) -> None:
    errors = [e.message for e in _validator(schema).iter_errors(document)]
    assert not errors, f"{path.name}: {errors}"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (("algorithm", "learning_rate"), -1e-6),
        (("algorithm", "learning_rate"), 0.0),
        (("algorithm", "name"), "dpo"),
        (("algorithm", "max_steps"), 0),
        (("data", "difficulty"), 7),
        (("resources", "gpus_per_node"), -1),
        (("model", "dtype"), "int8"),
        (("reward",), []),
    ],
    ids=lambda v: ".".join(v) if isinstance(v, tuple) else repr(v),
)
def test_rejects_what_pydantic_rejects(
    schema: dict[str, Any], field: tuple[str, ...], value: Any
) -> None:
    from pydantic import ValidationError

    from sarl.spec.experiment import Experiment

    _, document = _example_documents()[0]
    bad = copy.deepcopy(document)
    node = bad["spec"]
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    assert list(_validator(schema).iter_errors(bad)), (
        f"CRD accepted spec.{'.'.join(field)}={value!r}"
    )
    with pytest.raises(ValidationError):
        Experiment.model_validate(bad)


def test_null_is_accepted_where_the_model_allows_none(schema: dict[str, Any]) -> None:
    _, document = _example_documents()[0]
    document = copy.deepcopy(document)
    document["spec"]["algorithm"]["max_steps"] = None
    document["spec"]["tracking"]["mlflow_uri"] = None
    assert not list(_validator(schema).iter_errors(document))


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "2 non-null alternatives"),
        ({"description": "no type"}, "needs a type"),
        ({"type": ["string", "null"]}, "one type per node"),
        ({"type": "string", "oneOf": []}, "'oneOf'"),
        ({"$ref": "#/$defs/Missing"}, "unresolvable"),
        ({"$ref": "#/$defs/Loop"}, "nested too deep"),
    ],
)
def test_converter_refuses_non_structural_constructs(node: dict[str, Any], message: str) -> None:
    loop = {"type": "object", "properties": {"next": {"$ref": "#/$defs/Loop"}}}
    with pytest.raises(generate.CRDSchemaError, match=message):
        generate.structural(node, {"Loop": loop}, "spec.x")


def test_converter_conversions() -> None:
    defs = {
        "Inner": {
            "type": "object",
            "title": "Inner",
            "additionalProperties": False,
            "properties": {"k": {"const": "v", "type": "string", "default": "v"}},
        }
    }
    node = {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}], "description": "d"}
    assert generate.structural(node, defs) == {
        "type": "object",
        "description": "d",
        "nullable": True,
        "properties": {"k": {"type": "string", "enum": ["v"]}},
    }
    assert generate.structural({"type": "number", "exclusiveMinimum": 0}, {}) == {
        "type": "number",
        "exclusiveMinimum": True,
        "minimum": 0,
    }
    assert generate.structural({"type": "object", "additionalProperties": True}, {}) == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
