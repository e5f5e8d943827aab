"""Every pod the operator creates passes the Pod Security Standard ``restricted`` (issue 36,
item 7): checked with ``tests/support/pod_security.py`` (pod-security-admission v0.31.0's
policy/check_*.go) on the pods as they reach the API server, for a matrix of Experiments.

No Kubernetes controller runs here, so the pods come from the emulations the other operator
tests use: a PyTorchJob's replica templates with, on Workers, the Training Operator's own init
container from the chart's template (charts/sarl-platform/files/training-operator-init-container
.yaml, Training Operator v1.9 ``initcontainer.go`` appends it); a TrainJob resolved against the
chart's ClusterTrainingRuntime into its JobSet (tests/jobs/trainjob_emulator: Trainer v2.3.0
``mergeRuntimePatches``); an InferenceService merged into KServe's Hugging Face runtime
(tests/operators/kserve_merge.py, every release it emulates); the evaluation and Study report
Jobs' pod templates as built.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any, Final

import pytest
import yaml

from sarl_operator import evaluation, served_models, study_builders, trainjob
from sarl_operator.builders import pytorchjob
from tests.operators import kserve_merge, study_cases
from tests.operators.cases import (
    CASES,
    IMAGE,
    NAMESPACE,
    PLATFORM,
    ROOT,
    RUN_ID,
    TRACKING_URI,
    experiment_of,
)
from tests.support.pod_security import pod_templates, violations

INIT_TEMPLATE: Final = ROOT / "charts/sarl-platform/files/training-operator-init-container.yaml"


def _doc(case: str, backend: str, nodes: int, **resources: Any) -> dict[str, Any]:
    doc = copy.deepcopy(CASES[case]())
    doc["metadata"]["name"] = f"{case}-{backend}-{nodes}"
    res = doc["spec"].setdefault("resources", {})
    res.update({"backend": backend, "nodes": nodes, **resources})
    return doc


#: (id, Experiment document): backends, node counts, a scratch claim and a PVC policy, a named
#: service account, served embedding and judge models.
DOCS: Final[dict[str, Callable[[], dict[str, Any]]]] = {
    "verl-1": lambda: _doc("sarl-grpo-math", "verl", 1),
    "verl-2-embedding": lambda: _doc("sarl-grpo-math-2node", "verl", 2),
    "trl-1": lambda: _doc("sarl-grpo-math", "trl", 1),
    "trl-2": lambda: _doc("sarl-grpo-math", "trl", 2),
    "verl-2-claim": lambda: _doc(
        "sarl-grpo-math", "verl", 2, scratch_claim="scratch", service_account="trainer"
    ),
    "verl-1-judge": lambda: _doc("sarl-grpo-judge", "verl", 1),
}


def _operator_init_container() -> dict[str, Any]:
    """The Training Operator's Worker init container, from the chart's template with its Go
    fields filled as the Training Operator does."""
    text = re.sub(
        r"\{\{\.(\w+)\}\}", lambda m: f"x-{m.group(1).lower()}", INIT_TEMPLATE.read_text()
    )
    (container,) = yaml.safe_load(text)
    return dict(container)


def _pytorchjob_pods(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    job = pytorchjob(
        experiment_of(doc), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI, platform=PLATFORM,
    )  # fmt: skip
    out = []
    for where, template, meta in pod_templates(job):
        pod = copy.deepcopy(dict(template))
        if where.endswith("/Worker"):
            pod["initContainers"] = [*pod.get("initContainers", []), _operator_init_container()]
        out.append((where, pod, dict(meta)))
    return out


def _trainjob_pods(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    from tests.jobs.trainjob_emulator.resolve import jobset
    from tests.jobs.trainjob_emulator.sarl import sarl_runtime

    job = trainjob.trainjob(
        experiment_of(doc), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI, platform=PLATFORM,
    )  # fmt: skip
    return [(w, dict(p), dict(m)) for w, p, m in pod_templates(jobset(job, sarl_runtime()))]


def _eval_pods(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    job = evaluation.eval_job(
        experiment_of(doc), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI, platform=PLATFORM,
    )  # fmt: skip
    return [(w, dict(p), dict(m)) for w, p, m in pod_templates(job)]


def _predictor_pods(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    isvcs = served_models.inference_services(experiment_of(doc), NAMESPACE, PLATFORM)
    return [
        (f"{isvc['metadata']['name']}@kserve-{tag}", kserve_merge.predictor_pod(isvc, release), {})
        for isvc in isvcs
        for tag, release in kserve_merge.RELEASES.items()
    ]


BUILDS: Final = {
    "PyTorchJob": _pytorchjob_pods,
    "TrainJob": _trainjob_pods,
    "evaluation": _eval_pods,
    "InferenceService": _predictor_pods,
}


def _assert_restricted(pods: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
    found = {where: violations(pod, meta) for where, pod, meta in pods}
    assert {w: v for w, v in found.items() if v} == {}


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("doc", sorted(DOCS))
def test_every_pod_of_an_experiment_is_restricted(doc: str, build: str) -> None:
    if build == "TrainJob":
        pytest.importorskip("helm_python")  # the chart's runtime is rendered
    pods = BUILDS[build](DOCS[doc]())
    if build == "InferenceService" and not pods:
        pytest.skip(f"{doc} serves no model")
    assert pods
    _assert_restricted(pods)


def test_the_served_models_cover_embedding_and_judge() -> None:
    """The matrix above reaches both kinds of served model (else it would pass vacuously)."""
    names = {w.split("@")[0] for d in DOCS.values() for w, _, _ in _predictor_pods(d())}
    assert any(n.endswith("-embedding") for n in names) and any(n.endswith("-judge") for n in names)


@pytest.mark.parametrize("doc", [study_cases.example_doc, lambda: study_cases.small_doc("s")])
def test_the_study_report_pod_is_restricted(doc: Callable[[], dict[str, Any]]) -> None:
    job = study_builders.report_job(
        study_cases.study(doc()), NAMESPACE, image=IMAGE,
        parent_run_id=study_cases.PARENT_RUN_ID, tracking_uri=TRACKING_URI, platform=PLATFORM,
    )  # fmt: skip
    pods = [(w, dict(p), dict(m)) for w, p, m in pod_templates(job)]
    assert pods and all(p.get("initContainers") for _, p, _ in pods)
    _assert_restricted(pods)


def test_pods_that_never_call_the_api_get_no_token() -> None:
    """The default service account's token is not mounted into job and predictor pods; a
    service account the spec names keeps its own setting (workload identity may read it)."""
    (_, plain, _), *_ = _pytorchjob_pods(DOCS["verl-1"]())
    assert plain["automountServiceAccountToken"] is False
    (_, named, _), *_ = _pytorchjob_pods(DOCS["verl-2-claim"]())
    assert named["serviceAccountName"] == "trainer" and "automountServiceAccountToken" not in named
    for _, pod, _ in _predictor_pods(DOCS["verl-1-judge"]()):
        assert pod["automountServiceAccountToken"] is False


def test_the_checker_refuses_what_the_old_builders_made() -> None:
    """The check is not vacuous: a pod as the operator built it before (no securityContext)
    fails runAsNonRoot, seccomp, allowPrivilegeEscalation and capabilities."""
    (_, pod, meta), *_ = _pytorchjob_pods(DOCS["verl-1"]())
    bare = copy.deepcopy(pod)
    bare.pop("securityContext")
    for c in bare["containers"]:
        c.pop("securityContext")
    failed = {line.split(":")[0] for line in violations(bare, meta)}
    assert failed == {
        "allowPrivilegeEscalation", "runAsNonRoot", "seccompProfile_restricted",
        "capabilities_restricted",
    }  # fmt: skip
