"""Every model an example or preset calls is served: built by the operator, each Experiment (each
arm x seed of a Study) calls an embedding or chat endpoint only where an InferenceService the
operator builds for it (or its Study) serves that model, or where a chart of this repository
serves it (hosts and model names read from the real Helm render of charts/sarl-inference with its
default values, release ``sarl-inference``, any namespace).

Issue 19: the ``paper-*`` presets named ``http://sarl-embedding:8000``, which nothing here
creates; the first structure-reward batch failed on DNS.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import pytest
import yaml

from sarl.integrations.cluster import chat_endpoints
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_study
from sarl.spec.presets import PRESETS
from sarl_operator import builders, served_models, study_builders
from tests.charts.rendering import INFERENCE, Case, objects_of_kind
from tests.operators.cases import NAMESPACE, PLATFORM, ROOT, experiment_of
from tests.operators.kserve_merge import effective_flags

EXAMPLES: Final = sorted((ROOT / "examples").glob("*.yaml"))
STUDIES: Final = sorted((ROOT / "examples" / "studies").glob("*.yaml"))
_RAW_MODES: Final = frozenset({"RawDeployment", "Standard"})
#: The URL and model name docs/how-to/embedder-and-judge.md documents for calling the sarl-
#: inference chart's embedding model instead of one the operator serves (chart installed as release
#: sarl-inference).
CHART_EMBEDDER: Final = {
    "kind": "openai",
    "model": "embedding",
    "url": "http://sarl-inference-embedding-predictor.research.svc.cluster.local/openai",
}


def _served_name(isvc: dict[str, Any]) -> str:
    """The model name the predictor answers to: vLLM's --model_name, the sarl server's --name."""
    predictor = isvc["spec"]["predictor"]
    args = (
        predictor["model"]["args"] if "model" in predictor else predictor["containers"][0]["args"]
    )
    flags = effective_flags([str(a) for a in args])
    return str(flags.get("--model-name") or flags["--name"])


def _chart_served() -> list[tuple[re.Pattern[str], str]]:
    """(host pattern, model name) of each InferenceService the chart renders by default."""
    out = []
    for isvc in objects_of_kind(Case(INFERENCE), "InferenceService"):
        mode = isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"]
        host = isvc["metadata"]["name"] + ("-predictor" if mode in _RAW_MODES else "")
        pattern = re.compile(rf"^{re.escape(host)}\.[a-z0-9-]+\.svc(\.cluster\.local)?(:80)?$")
        out.append((pattern, _served_name(isvc)))
    return out


def _operator_served(isvcs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(base URL, model name) of InferenceServices the operator builds."""
    return {
        (served_models.predictor_url(i["metadata"]["name"], NAMESPACE, PLATFORM), _served_name(i))
        for i in isvcs
    }


def called_endpoints(exp: Experiment) -> Iterator[tuple[str, str, str]]:
    """(field, url, model) of every model endpoint the trainer of ``exp`` calls, read from the
    spec the operator mounts (:func:`builders.rendered_spec`)."""
    reward = builders.rendered_spec(exp, NAMESPACE, PLATFORM)["spec"]["reward"]
    for i, term in enumerate(reward):
        emb = (term.get("settings") or {}).get("embedder")
        if isinstance(emb, dict) and emb.get("kind") == "openai":
            yield f"spec.reward[{i}].settings.embedder", str(emb["url"]), str(emb["model"])
    for path, endpoint in chat_endpoints(reward):
        yield path, str(endpoint.get("url") or ""), str(endpoint.get("model") or "")


def unserved(exp: Experiment, shared: list[dict[str, Any]] = ()) -> list[str]:  # type: ignore[assignment]
    """Each endpoint of ``exp`` that neither the operator (its own or its Study's ``shared``
    InferenceServices) nor the sarl-inference chart serves."""
    operator = _operator_served(
        [*served_models.inference_services(exp, NAMESPACE, PLATFORM), *shared]
    )
    chart = _chart_served()
    out = []
    for field, url, model in called_endpoints(exp):
        if (url, model) in operator:
            continue
        parts = urlsplit(url)
        if parts.path.rstrip("/") == "/openai" and any(
            pattern.match(parts.netloc) and model == name for pattern, name in chart
        ):
            continue
        out.append(f"{exp.name}: {field} calls {url!r} (model {model!r}), served by nothing here")
    return out


def _experiment_doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc


def _preset_doc(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "paper"},
        "spec": {"preset": name},
    }


@pytest.mark.parametrize("path", [p for p in EXAMPLES], ids=lambda p: p.name)
def test_example_calls_only_served_models(path: Path) -> None:
    assert unserved(experiment_of(_experiment_doc(path))) == []


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_calls_only_served_models(name: str) -> None:
    assert unserved(experiment_of(_preset_doc(name))) == []


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_study_runs_call_only_served_models(path: Path) -> None:
    """Every arm x seed Experiment, as the Study operator creates it."""
    study = load_study(path)
    shared = [m.isvc for m in study_builders.shared_models(study, NAMESPACE, PLATFORM)]
    runs = study_builders.experiments(study, NAMESPACE, "parent")
    assert len(runs) == len(study.spec.arms) * len(study.spec.seeds)
    for doc in runs:
        assert unserved(experiment_of(doc), shared) == []


def test_paper_presets_let_the_operator_serve_the_embedder() -> None:
    """The presets' embedder has no URL: the operator creates ``<name>-embedding`` for it."""
    for name in (n for n in PRESETS if n.startswith("paper-")):
        exp = experiment_of(_preset_doc(name))
        (isvc,) = served_models.inference_services(exp, NAMESPACE, PLATFORM)
        assert isvc["metadata"]["name"] == "paper-embedding"
        assert "--model_id=Qwen/Qwen3-Embedding-0.6B" in isvc["spec"]["predictor"]["model"]["args"]


def test_the_charts_embedding_service_is_a_served_url() -> None:
    """The documented way to call the sarl-inference chart's embedding model instead passes;
    the host the presets used to name does not."""
    doc = _preset_doc("paper-grpo-math")
    doc["spec"]["reward"] = [
        {"name": "structure", "settings": {"clustering": "kmeans", "embedder": CHART_EMBEDDER}}
    ]
    exp = experiment_of(doc)
    assert served_models.inference_services(exp, NAMESPACE, PLATFORM) == []
    assert unserved(exp) == []
    old = copy.deepcopy(doc)
    old["spec"]["reward"][0]["settings"]["embedder"] = {
        "kind": "openai",
        "model": "Qwen/Qwen3-Embedding-0.6B",
        "url": "http://sarl-embedding:8000",
    }
    (problem,) = unserved(experiment_of(old))
    assert "http://sarl-embedding:8000" in problem
