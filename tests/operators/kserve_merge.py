"""What KServe makes of an InferenceService's ``model`` predictor on the Hugging Face runtime:
the predictor pod's ``kserve-container`` and pod-level fields, emulated in Python.

Called by ``tests/operators/test_kserve_merge.py`` for the operator's InferenceServices
(``sarl_operator.served_models.inference_services``) and the sarl-inference chart's. KServe's Go
code is not run or copied; this follows what it does, read in github.com/kserve/kserve at the tags
of :data:`RELEASES` (the runtime itself is the upstream YAML under ``fixtures/kserve/<tag>/``):

1. ``pkg/controller/v1beta1/inferenceservice/components/predictor.go`` (``Reconcile`` at v0.15.0,
   ``buildPodSpec`` at v0.20.0) calls ``isvcutils.MergeServingRuntimeAndInferenceServiceSpecs``
   with the runtime's containers, ``isvc.Spec.Predictor.Model.Container`` (only the
   ``corev1.Container`` fields of ``model``; ``modelFormat``, ``runtime``, ``storageUri``... are
   not part of it), the runtime's pod fields and the predictor's inline PodSpec.
2. ``MergeRuntimeContainers`` (``pkg/controller/v1beta1/inferenceservice/utils/utils.go``): the
   runtime container named ``kserve-container`` is the *base* and the ISVC's container a
   strategic merge patch over it (``strategicpatch.StrategicMergePatch`` with ``corev1.Container``'s
   patch metadata): scalars are replaced, maps (``resources.requests``/``limits``,
   ``securityContext``) merged key by key, ``env``/``ports``/``volumeMounts``/``volumeDevices``
   merged by their keys, every other list replaced. An empty name is restored from the runtime.
   Then ``Args = runtime.Args + isvc.Args``: concatenated, not replaced, so the runtime's
   ``--model_name={{.Name}}`` stays in front of the ISVC's own ``--model_name`` (argparse keeps
   the last). At v0.20.0 the patch moved to ``pkg/utils/container_merge.go``
   (``MergeContainerWithPatch``), which also clears ``value`` or ``valueFrom`` of an env var the
   merge left with both (the ISVC's side wins); before, such a pod is rejected by the API server.
3. ``MergePodSpec``: a PodSpec of the runtime's ``nodeSelector``, ``affinity``, ``tolerations``,
   ``volumes``, ``imagePullSecrets`` (and ``schedulerName`` from v0.17.0) is the base and the
   predictor's PodSpec the patch (``tolerations`` replaced, ``nodeSelector`` merged, ``volumes``
   merged by name). The runtime's ``hostIPC`` is not carried over.
4. ``ReplacePlaceholders``: the merged container's JSON is run through Go ``text/template`` with
   the ISVC's ObjectMeta, so ``{{.Name}}`` becomes the InferenceService's name.
5. From v0.17.0 ``INFERENCE_SERVICE_NAME=<isvc name>`` is set on the container
   (``AddEnvVarToPodSpec``: overwritten if present, else appended).

Nothing adds resources before the merge: the webhook's ``ModelSpec.Default`` is empty
(``pkg/apis/serving/v1beta1/predictor_model.go``), so whatever the ISVC leaves out keeps the
runtime's value (1 CPU, 2Gi for ``kserve-huggingfaceserver``).

The order of a merged keyed list follows apimachinery's ``mergeSlice``: the ISVC's items in its
order, with the runtime-only items placed before an ISVC item only when both are in the runtime
list and the runtime item comes first (so a new ISVC item goes before the runtime's leftovers).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

FIXTURES: Final = Path(__file__).resolve().parent / "fixtures" / "kserve"
RUNTIME_NAME: Final = "kserve-huggingfaceserver"
CONTAINER_NAME: Final = "kserve-container"
ISVC_NAME_ENV: Final = "INFERENCE_SERVICE_NAME"
#: Fields of ``predictor.model`` that are KServe's ModelSpec, not the container's.
_MODEL_SPEC_FIELDS: Final = frozenset(
    {"modelFormat", "runtime", "storageUri", "storage", "protocolVersion", "runtimeVersion"}
)
_CONTAINER_FIELDS: Final = frozenset(
    {
        "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle",
        "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "resources",
        "restartPolicy", "securityContext", "startupProbe", "stdin", "stdinOnce",
        "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
        "volumeMounts", "workingDir",
    }
)  # fmt: skip
_POD_SPEC_FIELDS: Final = frozenset(
    {
        "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "dnsConfig",
        "dnsPolicy", "enableServiceLinks", "hostAliases", "hostIPC", "hostNetwork", "hostPID",
        "hostUsers", "hostname", "imagePullSecrets", "nodeName", "nodeSelector", "os",
        "overhead", "preemptionPolicy", "priority", "priorityClassName", "readinessGates",
        "resourceClaims", "runtimeClassName", "schedulerName", "schedulingGates",
        "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN",
        "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "tolerations",
        "topologySpreadConstraints", "volumes",
    }
)  # fmt: skip


@dataclass(frozen=True)
class _MergeList:
    """A list with ``patchStrategy: merge`` and its ``patchMergeKey`` (corev1 struct tags)."""

    key: str
    item: Mapping[str, _MergeList] = field(default_factory=dict)


# Only the keyed lists need listing: maps always merge, other lists are replaced.
_CONTAINER: Final[Mapping[str, _MergeList]] = {
    "env": _MergeList("name"),
    "ports": _MergeList("containerPort"),
    "volumeMounts": _MergeList("mountPath"),
    "volumeDevices": _MergeList("devicePath"),
}
_POD_SPEC: Final[Mapping[str, _MergeList]] = {
    "volumes": _MergeList("name"),
    "imagePullSecrets": _MergeList("name"),
    "hostAliases": _MergeList("ip"),
    "topologySpreadConstraints": _MergeList("topologyKey"),
    "resourceClaims": _MergeList("name"),
    "schedulingGates": _MergeList("name"),
}


@dataclass(frozen=True)
class Release:
    """One KServe release: where its runtime YAML is and which merge details it has."""

    tag: str
    #: ServingRuntimePodSpec fields MergePodSpec starts from.
    runtime_pod_fields: tuple[str, ...]
    #: Sets INFERENCE_SERVICE_NAME on the predictor container (v0.17.0 on).
    sets_isvc_name_env: bool
    #: MergeContainerWithPatch clears value/valueFrom conflicts (v0.20.0 on).
    reconciles_env_conflicts: bool

    def runtime(self) -> dict[str, Any]:
        """The ``kserve-huggingfaceserver`` ClusterServingRuntime of this release."""
        path = FIXTURES / self.tag / f"{RUNTIME_NAME}.yaml"
        doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
        return doc


_POD_BASE: Final = ("nodeSelector", "affinity", "tolerations", "volumes", "imagePullSecrets")
RELEASES: Final[Mapping[str, Release]] = {
    r.tag: r
    for r in (
        Release("v0.15.0", _POD_BASE, sets_isvc_name_env=False, reconciles_env_conflicts=False),
        Release(
            "v0.17.0",
            (*_POD_BASE, "schedulerName"),
            sets_isvc_name_env=True,
            reconciles_env_conflicts=False,
        ),
        Release(
            "v0.20.0",
            (*_POD_BASE, "schedulerName"),
            sets_isvc_name_env=True,
            reconciles_env_conflicts=True,
        ),
    )
}


def _typed(value: Any) -> Any:
    """The value as the API server stores a typed object: null fields are simply absent."""
    if isinstance(value, Mapping):
        return {k: _typed(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return value


def strategic_merge(
    base: Mapping[str, Any], patch: Mapping[str, Any], schema: Mapping[str, _MergeList]
) -> dict[str, Any]:
    """``patch`` strategically merged over ``base`` (neither is modified)."""
    out = copy.deepcopy(dict(base))
    for key, value in patch.items():
        old = out.get(key)
        if key in schema and isinstance(old, list) and isinstance(value, list):
            out[key] = _merge_keyed(old, value, schema[key])
        elif isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = strategic_merge(old, value, {})
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_keyed(base: list[Any], patch: list[Any], spec: _MergeList) -> list[Any]:
    """apimachinery's mergeSlice for a list of maps with a merge key, order included."""
    merged = copy.deepcopy(base)
    for item in patch:
        at = next((i for i, old in enumerate(merged) if old.get(spec.key) == item[spec.key]), None)
        if at is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[at] = strategic_merge(merged[at], item, spec.item)
    patch_keys = [item[spec.key] for item in patch]
    base_keys = [item[spec.key] for item in base]
    from_patch = sorted(
        (m for m in merged if m[spec.key] in patch_keys),
        key=lambda m: patch_keys.index(m[spec.key]),
    )
    server_only = [m for m in merged if m[spec.key] not in patch_keys]  # already in base order
    out: list[Any] = []
    while from_patch or server_only:
        # mergeSortedSlice: a runtime-only item goes first only when both are runtime items and it
        # comes first there; otherwise the ISVC's item does.
        if server_only and (
            not from_patch
            or (
                from_patch[0][spec.key] in base_keys
                and base_keys.index(server_only[0][spec.key])
                < base_keys.index(from_patch[0][spec.key])
            )
        ):
            out.append(server_only.pop(0))
        else:
            out.append(from_patch.pop(0))
    return out


def merge_runtime_container(
    runtime: Mapping[str, Any], isvc: Mapping[str, Any], release: Release
) -> dict[str, Any]:
    """``MergeRuntimeContainers``: runtime container as base, args concatenated."""
    merged = strategic_merge(runtime, isvc, _CONTAINER)
    merged["name"] = isvc.get("name") or runtime["name"]
    merged["args"] = [*runtime.get("args", []), *isvc.get("args", [])]
    if release.reconciles_env_conflicts:
        overlay = {e["name"]: e for e in isvc.get("env", [])}
        for env in merged.get("env", []):
            if "value" in env and "valueFrom" in env and env["name"] in overlay:
                env.pop("value" if "valueFrom" in overlay[env["name"]] else "valueFrom")
    return merged


_PLACEHOLDER: Final = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_META_FIELD: Final = re.compile(
    r'^(?:\.(Labels|Annotations)\.(\w+)|index \.(Labels|Annotations) "([^"]+)")$'
)


def replace_placeholders(value: Any, metadata: Mapping[str, Any]) -> Any:
    """``ReplacePlaceholders`` for the templates runtimes use: ``{{.Name}}``, ``{{.Namespace}}``,
    ``{{.Labels.x}}``/``{{.Annotations.x}}`` (or ``index``). Any other template, or a missing
    label (which Go prints as ``<no value>``), raises ValueError: KServe would not fill it in."""
    if isinstance(value, Mapping):
        return {k: replace_placeholders(v, metadata) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_placeholders(v, metadata) for v in value]
    if not isinstance(value, str):
        return value

    def fill(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr == ".Name":
            return str(metadata["name"])
        if expr == ".Namespace":  # empty in a chart render (Helm sets it at apply time)
            return str(metadata.get("namespace", ""))
        if (m := _META_FIELD.match(expr)) is not None:
            where, key = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            found = metadata.get(where.lower(), {})
            if key in found:
                return str(found[key])
            raise ValueError(f"placeholder {match.group(0)}: no such {where[:-1].lower()}")
        raise ValueError(f"placeholder {match.group(0)} is not emulated")

    return _PLACEHOLDER.sub(fill, value)


def _model_container(model: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(model) - _MODEL_SPEC_FIELDS - _CONTAINER_FIELDS)
    if unknown:
        raise ValueError(f"predictor.model: {unknown} are neither ModelSpec nor Container fields")
    return {k: v for k, v in model.items() if k in _CONTAINER_FIELDS}


def predictor_pod(isvc: Mapping[str, Any], release: Release) -> dict[str, Any]:
    """The predictor pod spec KServe ``release`` builds for ``isvc`` on the Hugging Face
    runtime: ``containers`` holds the merged ``kserve-container``, the other keys are the merged
    pod fields. Raises ValueError for what the runtime would not serve (another model format or
    runtime, a custom container next to ``model``)."""
    isvc = _typed(isvc)
    predictor = isvc["spec"]["predictor"]
    model = predictor["model"]
    runtime = release.runtime()
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"] if f.get("autoSelect")}
    if model["modelFormat"]["name"] not in formats:
        raise ValueError(f"modelFormat {model['modelFormat']['name']!r}: not {RUNTIME_NAME}")
    if model.get("runtime", RUNTIME_NAME) != RUNTIME_NAME:
        raise ValueError(f"runtime {model['runtime']!r}: only {RUNTIME_NAME} is emulated")
    if "containers" in predictor:
        raise ValueError("predictor.containers next to model (collocation) is not emulated")
    base = next(c for c in runtime["spec"]["containers"] if c["name"] == CONTAINER_NAME)
    container = merge_runtime_container(base, _model_container(model), release)
    container = replace_placeholders(container, isvc["metadata"])
    if release.sets_isvc_name_env:
        env = container.setdefault("env", [])
        found = next((e for e in env if e["name"] == ISVC_NAME_ENV), None)
        if found is None:
            env.append({"name": ISVC_NAME_ENV, "value": isvc["metadata"]["name"]})
        else:
            found["value"] = isvc["metadata"]["name"]
    spec = runtime["spec"]
    pod_base = {k: spec[k] for k in release.runtime_pod_fields if k in spec}
    pod_patch = {k: v for k, v in predictor.items() if k in _POD_SPEC_FIELDS}
    pod = strategic_merge(pod_base, pod_patch, _POD_SPEC)
    return {**pod, "containers": [container]}


def flag_values(args: Sequence[str]) -> dict[str, list[str | None]]:
    """Each ``--flag`` of a command line (dashes and underscores alike, as vLLM's parser reads
    them) with its values in order; argparse keeps the last. ``--flag value`` pairs count too."""
    out: dict[str, list[str | None]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-"):
            continue
        name, eq, value = arg.partition("=")
        if not eq and i < len(args) and not args[i].startswith("-"):
            value, i = args[i], i + 1
        out.setdefault(name.replace("_", "-"), []).append(value if (eq or value) else None)
    return out


def effective_flags(args: Sequence[str]) -> dict[str, str | None]:
    """The value each flag ends up with (the last occurrence)."""
    return {name: values[-1] for name, values in flag_values(args).items()}
