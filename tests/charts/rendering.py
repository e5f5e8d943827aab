"""Render the Helm charts under ``charts/`` with the real Helm engine (helm-python-sdk, Helm's Go
SDK through a C ABI; no helm binary), offline.

Shared by the chart tests and by ``regenerate_golden.py``. A *case* is a chart plus one values
file from the chart's ``ci/`` directory (``default`` is the chart's own values.yaml alone); the
same cases are linted, rendered, validated and, for :data:`GOLDEN_CASES`, compared with golden
files.

A case may also name the APIs the cluster serves (``helm template --api-versions``, what a
template's ``.Capabilities.APIVersions.Has`` sees; Helm's own list otherwise holds only the
built-in Kubernetes APIs): :data:`API_SETS`.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHARTS_DIR = REPO_ROOT / "charts"
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
NAMESPACE = "sarl"
KUBE_VERSION = "1.33"  # a version kubernetes-validate ships schemas for

INFERENCE = "sarl-inference"
PLATFORM = "sarl-platform"

#: The kind the platform chart's ClusterTrainingRuntime needs (Kubeflow Trainer v2).
TRAINER_V2_RUNTIME = "trainer.kubeflow.org/v1alpha1/ClusterTrainingRuntime"
#: Extra APIs a case's cluster serves, by name: only the Trainer v2, or only the Training
#: Operator v1 (its PyTorchJob; no ClusterTrainingRuntime).
API_SETS: dict[str, tuple[str, ...]] = {
    "trainer-v2": ("trainer.kubeflow.org/v1alpha1", TRAINER_V2_RUNTIME),
    "training-operator": ("kubeflow.org/v1", "kubeflow.org/v1/PyTorchJob"),
}


@dataclass(frozen=True)
class Case:
    """One rendering of a chart: ``values`` names ``charts/<chart>/ci/<values>-values.yaml``,
    ``apis`` a key of :data:`API_SETS` (empty: the built-in Kubernetes APIs only)."""

    chart: str
    values: str = "default"
    apis: str = ""

    @property
    def id(self) -> str:
        return f"{self.chart}-{self.values}" + (f"-{self.apis}" if self.apis else "")

    @property
    def api_versions(self) -> tuple[str, ...]:
        return API_SETS[self.apis] if self.apis else ()

    @property
    def values_file(self) -> Path | None:
        if self.values == "default":
            return None
        return CHARTS_DIR / self.chart / "ci" / f"{self.values}-values.yaml"

    def load_values(self) -> dict[str, Any]:
        path = self.values_file
        if path is None:
            return {}
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        return loaded if isinstance(loaded, dict) else {}


CASES: tuple[Case, ...] = (
    Case(INFERENCE),
    Case(INFERENCE, "gpu"),
    Case(INFERENCE, "raw-deployment"),
    Case(INFERENCE, "serverless"),
    Case(INFERENCE, "cpu-embedding"),
    Case(INFERENCE, "judge-disabled"),
    Case(PLATFORM),
    Case(PLATFORM, "external-s3"),
    Case(PLATFORM, "namespaced"),
    Case(PLATFORM, "cluster-wide"),
    Case(PLATFORM, "tenants"),
    Case(PLATFORM, apis="trainer-v2"),
    Case(PLATFORM, apis="training-operator"),
)
GOLDEN_CASES: tuple[Case, ...] = (
    Case(INFERENCE),
    Case(INFERENCE, "gpu"),
    Case(PLATFORM),
    Case(PLATFORM, "external-s3"),
    Case(PLATFORM, "tenants"),
    Case(PLATFORM, apis="trainer-v2"),
)


def release_name(chart: str) -> str:
    """Release name used for every render (the chart's own name: object names stay short)."""
    return chart


def render_templates(
    chart: str, values: dict[str, Any] | None = None, api_versions: tuple[str, ...] = ()
) -> dict[str, str]:
    """Template path -> rendered text, as ``helm template`` would produce (CRDs excluded), with
    ``--api-versions`` for each of ``api_versions``.

    Raises ``helm_python.HelmError`` (``HelmValuesError`` for a schema violation,
    ``HelmRenderError`` for a template ``fail``).
    """
    import helm_python as helm

    with helm.Chart.load(CHARTS_DIR / chart) as loaded:
        if not api_versions:
            return loaded.render(
                values or None, name=release_name(chart), namespace=NAMESPACE, is_install=True
            )
        # Chart.render (helm-python-sdk 0.2.2) does not pass api_versions on, but the library's
        # helm_render takes it in its options, as `helm template --api-versions` does.
        from helm_python import _native

        options = {
            "name": release_name(chart),
            "namespace": NAMESPACE,
            "is_install": True,
            "api_versions": list(api_versions),
        }
        rendered = _native.call_string(
            "helm_render",
            loaded._raw(),
            json.dumps(values) if values else None,
            json.dumps(options),
        )
        manifests: dict[str, str] = json.loads(rendered)
        return manifests


def chart_crds(chart: str) -> list[dict[str, Any]]:
    """The parsed objects of the chart's ``crds/`` directory (Helm installs them as they are)."""
    import helm_python as helm

    with helm.Chart.load(CHARTS_DIR / chart) as loaded:
        return [doc for crd in loaded.crds for doc in yaml.safe_load_all(crd["data"]) if doc]


@functools.cache
def _rendered(case: Case) -> tuple[tuple[str, str], ...]:
    rendered = render_templates(case.chart, case.load_values(), case.api_versions)
    return tuple(sorted(rendered.items()))


def rendered(case: Case) -> dict[str, str]:
    """Cached :func:`render_templates` of a case."""
    return dict(_rendered(case))


def objects(case: Case) -> list[dict[str, Any]]:
    """Every Kubernetes object the case renders (NOTES.txt and empty documents skipped)."""
    found: list[dict[str, Any]] = []
    for path, text in _rendered(case):
        if path.endswith("NOTES.txt"):
            continue
        found.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return found


def objects_of_kind(case: Case, kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects(case) if obj.get("kind") == kind]


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a rendered object: a workload's ``spec.template.spec``, or each
    replicated job's of a ClusterTrainingRuntime (whose ``spec.template`` is a JobSet's)."""
    template = obj.get("spec", {}).get("template")
    if not template:
        return []
    if obj["kind"] == "ClusterTrainingRuntime":
        jobs = template["spec"]["replicatedJobs"]
        return [j["template"]["spec"]["template"]["spec"] for j in jobs]
    return [template["spec"]]


def golden_path(case: Case) -> Path:
    return GOLDEN_DIR / f"{case.id}.yaml"


#: Certificate material Helm's genCA/genSignedCert make anew on every render (the admission
#: webhook's TLS Secret and caBundle): masked in golden files, which must not change per render.
_GENERATED_CERT = re.compile(r"^(?P<key>\s*(?:tls\.crt|tls\.key|ca\.crt|caBundle): )\S{64,}$", re.M)
GENERATED_MASK = "<generated per render>"


def mask_generated(text: str) -> str:
    """``text`` with the generated certificate data replaced by :data:`GENERATED_MASK`."""
    return _GENERATED_CERT.sub(lambda m: m["key"] + GENERATED_MASK, text)


def golden_text(case: Case) -> str:
    """The golden file's expected content: every template in path order, like `helm template`,
    with generated certificates masked (:func:`mask_generated`)."""
    header = (
        "# GENERATED by tests/charts/regenerate_golden.py:"
        f" helm template {release_name(case.chart)} charts/{case.chart} -n {NAMESPACE}"
        + (f" -f charts/{case.chart}/ci/{case.values}-values.yaml" if case.values_file else "")
        + "".join(f" --api-versions {api}" for api in case.api_versions)
        + "\n# Do not edit; regenerate with `python tests/charts/regenerate_golden.py`.\n"
    )
    parts = [
        f"---\n# Source: {path}\n{mask_generated(text.strip())}\n"
        for path, text in _rendered(case)
        if not path.endswith("NOTES.txt") and text.strip()
    ]
    return header + "".join(parts)
