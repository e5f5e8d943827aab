"""Pure builders of a Study's children, and the plan of which arm x seed Experiments to create next.

Called by ``study_handlers`` (which owns and applies what these return) and by the golden-file
tests. Like :mod:`sarl_operator.builders`, nothing here imports kopf or kubernetes or reads the
environment. Children of a Study ``<study>`` in its namespace, each owned by the Study
(controller reference, so deleting the Study garbage-collects them):

* one Experiment per arm x seed, exactly as :meth:`sarl.spec.study.Study.runs` expands them
  (name ``<study>-<arm>-s<seed>``, labels ``sarl.dev/study|arm|seed``, MLflow tags incl.
  ``mlflow.parentRunId``): the operator's Experiment handlers then run each like any other;
* InferenceService ``<study>-emb-<hash>`` per distinct served embedding model (model id and
  serving spec, :func:`shared_models`) instead of one ``<run>-embedding`` per run: the runs'
  embedders are given its URL (a non-empty url, so their Experiments serve nothing); created
  before the first run that calls it, deleted once no unfinished run calls it (:func:`needed`);
* ConfigMap ``<study>-config``: ``study.yaml``, the Study's loggable fields (for the report Job);
* Job ``<study>-report`` once every run has finished: ``sarl study report`` in the trainer image,
  with the evaluation Job's pod builder and environment (``MLFLOW_RUN_ID`` = the parent run).
  An init container first logs ``study.yaml`` as ``spec/study.yaml`` of the parent run, where
  the report (and a later ``sarl study report`` from anywhere) reads the arm order, reference
  arm and ``k`` from, as for a Study run locally.

Which Experiments exist at once is decided by :func:`to_create` from the observed
:class:`RunState` of every run: at most ``spec.parallelism`` unfinished ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import yaml

from sarl.integrations.cluster import MAX_NAME, PREDICTOR_SUFFIX
from sarl.spec.experiment import API_VERSION, KIND, Experiment, Metadata
from sarl.spec.loggable import DOCUMENT_NOTE, loggable_study
from sarl.spec.secrets import redact
from sarl.spec.study import LABEL_STUDY, Study, StudyRun
from sarl_operator import child_meta, evaluation, job_pods, served_models
from sarl_operator.kube import controlled_by
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform

STUDY_KIND: Final = "Study"
#: A shared embedding service is ``<study>-emb-<8 hex digits>`` (:func:`shared_name`).
SHARED_EMBEDDING_INFIX: Final = "-emb-"
STUDY_FILE: Final = "study.yaml"
#: Where the Study document sits in the parent run's artifacts (``sarl.study.history`` reads it).
STUDY_ARTIFACT_DIR: Final = "spec"
REPORT_OUT: Final = "/tmp/report"
#: Where ``sarl study report`` logs the report in the parent run (``reportUri``).
REPORT_ARTIFACT_PATH: Final = "report/"
#: cpu, memory and scratch disk (ephemeral-storage) of the report pod, requests equal to
#: limits: it reads metrics from MLflow and draws a few figures on CPU (a fixed size, not the
#: Study's trainer resources, which are sized for an 8-GPU node).
REPORT_RESOURCES: Final = ("1", "2Gi", "2Gi")
#: Retries of the report pod: the report only reads MLflow, so a transient failure is retried.
REPORT_RETRIES: Final = 2

Outcome = Literal["pending", "running", "succeeded", "failed"]


def labels(study: Study, component: str) -> dict[str, str]:
    """Standard app.kubernetes.io labels plus ``sarl.dev/study`` (the selector label)."""
    return {
        "app.kubernetes.io/name": "sarl",
        "app.kubernetes.io/instance": study.name,
        "app.kubernetes.io/part-of": "sarl",
        "app.kubernetes.io/managed-by": "sarl-operator",
        "app.kubernetes.io/component": component,
        LABEL_STUDY: study.name,
    }


def owned(obj: Mapping[str, Any], study_meta: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` controlled by the Study with ``study_meta`` (name, uid)."""
    return child_meta.owned(obj, study_meta, kind=STUDY_KIND)


def experiment_object(run: StudyRun, namespace: str, embedding_url: str = "") -> dict[str, Any]:
    """The Experiment custom object of one arm x seed: name, labels and spec as expanded by
    :meth:`Study.runs` (spec as validated, presets applied, as ``sarl submit`` stores one).
    ``embedding_url``: the Study's shared embedding service the run's served embedders call
    (:func:`shared_models`), so the Experiment serves none itself."""
    exp = run.experiment
    spec = exp.spec.model_dump(mode="json")
    if embedding_url:
        spec = served_models.point_embedders(exp, embedding_url)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": exp.name,
            "namespace": namespace,
            "labels": dict(exp.metadata.labels),
        },
        "spec": spec,
    }


def experiments(
    study: Study,
    namespace: str,
    parent_run_id: str,
    platform: Platform = DEFAULT_PLATFORM,
) -> list[dict[str, Any]]:
    """Every arm x seed Experiment, in :meth:`Study.runs` order (the order they are created)."""
    urls = embedding_urls(shared_models(study, namespace, platform))
    return [
        experiment_object(run, namespace, urls.get(run.name, ""))
        for run in study.runs(parent_run_id or None)
    ]


# ---- served models shared by the runs ----


@dataclass(frozen=True)
class SharedModel:
    """One embedding InferenceService the Study serves for every run whose served embedder is
    the same model with the same serving spec (``runs``: their names). ``keep``: some of those
    runs sets ``spec.serving.release: never``."""

    isvc: dict[str, Any]
    url: str
    runs: tuple[str, ...]
    keep: bool

    @property
    def name(self) -> str:
        return str(self.isvc["metadata"]["name"])


def shared_name(study: Study, isvc: Mapping[str, Any]) -> str:
    """``<study>-emb-<hash>``: 8 hex digits of the InferenceService's spec and annotations, so
    runs share it exactly when they would have served the same thing. Shorter than any run's own
    ``<run>-embedding-predictor`` (which the runs' name check already bounds), still checked."""
    served = {"annotations": isvc["metadata"].get("annotations") or {}, "spec": isvc["spec"]}
    digest = hashlib.sha256(json.dumps(served, sort_keys=True).encode()).hexdigest()[:8]
    name = f"{study.name}{SHARED_EMBEDDING_INFIX}{digest}"
    if len(name) + len(PREDICTOR_SUFFIX) > MAX_NAME:
        raise ValueError(
            f"metadata.name={study.name!r}: its shared embedding predictor Service "
            f"{name}{PREDICTOR_SUFFIX!s} would exceed {MAX_NAME} characters; shorten the name"
        )
    return name


def shared_models(
    study: Study, namespace: str, platform: Platform = DEFAULT_PLATFORM
) -> list[SharedModel]:
    """The Study's shared embedding services, in the order their first run comes: each run's
    ``<run>-embedding`` InferenceService (:func:`served_models.embedding_service`), renamed
    :func:`shared_name` and labelled as the Study's. Raises ValueError as the builders do."""
    found: dict[str, tuple[dict[str, Any], list[str], bool]] = {}
    for run in study.runs():
        exp = run.experiment
        isvc = served_models.embedding_service(exp, namespace, platform)
        if isvc is None:
            continue
        name = shared_name(study, isvc)
        never = exp.spec.serving.release == "never"
        if name in found:
            first, runs, keep = found[name]
            found[name] = (first, [*runs, run.name], keep or never)
            continue
        component = dict(isvc["metadata"]["labels"])
        component.pop(child_meta.EXPERIMENT_LABEL, None)
        component.update(labels(study, "embedding"))
        isvc["metadata"] = {**isvc["metadata"], "name": name, "labels": component}
        found[name] = (isvc, [run.name], never)
    return [
        SharedModel(isvc, served_models.predictor_url(name, namespace, platform), tuple(runs), keep)
        for name, (isvc, runs, keep) in found.items()
    ]


def embedding_urls(models: Sequence[SharedModel]) -> dict[str, str]:
    """Run name -> the URL of the shared embedding service it calls."""
    return {run: model.url for model in models for run in model.runs}


def needed(model: SharedModel, states: Sequence[RunState]) -> bool:
    """Whether an unfinished run of the Study (created or not yet) still calls ``model``, or
    one of its runs keeps it (``spec.serving.release: never``)."""
    if model.keep:
        return True
    by_name = {s.run.name: s for s in states}
    return any(run not in by_name or not by_name[run].finished for run in model.runs)


def base_experiment(study: Study, namespace: str) -> Experiment:
    """The Study's base spec as an Experiment named after the Study: the report Job's image,
    environment and node placement come from it, as the evaluation Job's from its Experiment
    (and :func:`child_meta.config_name` of it is :func:`config_name`)."""
    return Experiment(metadata=Metadata(name=study.name, namespace=namespace), spec=study.spec.base)


def config_name(study: Study) -> str:
    return f"{study.name}-config"


def report_name(study: Study) -> str:
    return f"{study.name}-report"


def report_uri(parent_run_id: str) -> str:
    """The report's place in MLflow: the parent run's artifact path ``report/``."""
    return f"runs:/{parent_run_id}/{REPORT_ARTIFACT_PATH}"


def configmap(study: Study, namespace: str) -> dict[str, Any]:
    """ConfigMap ``<study>-config`` holding the Study as ``study.yaml``: the report Job logs it
    to the parent MLflow run, so only its allow-listed fields (:mod:`sarl.spec.loggable`, issue
    38 item 8; what the report reads: arms, reference, k), redacted
    (:func:`sarl.spec.secrets.redact`; a no-op on a validated Study)."""
    doc = redact(loggable_study(study.model_dump(mode="json")))
    doc["metadata"]["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_name(study),
            "namespace": namespace,
            "labels": labels(study, "config"),
        },
        "data": {STUDY_FILE: DOCUMENT_NOTE + yaml.safe_dump(doc, sort_keys=False)},
    }


def report_job(
    study: Study,
    namespace: str,
    *,
    image: str,
    parent_run_id: str,
    tracking_uri: str,
    platform: Platform = DEFAULT_PLATFORM,
) -> dict[str, Any]:
    """Job ``<study>-report``: ``sarl study report $MLFLOW_RUN_ID --tracking-uri
    $MLFLOW_TRACKING_URI --out /tmp/report --finish`` on CPU, built like the evaluation Job (same
    pod builder and environment, ``MLFLOW_RUN_ID`` = the parent run, ``SARL_CONFIG`` = the mounted
    ``study.yaml``), after an init container that logs ``study.yaml`` to the parent run
    (``mlflow artifacts log-artifact``). The report logs itself under ``report/`` of the parent
    run, then closes that run (``--finish``). The run is named by its id, never found by the
    Study's name: the newest parent run of a name may be another team's (issue 36)."""
    base = base_experiment(study, namespace)
    env = job_pods.job_env(
        base, namespace, parent_run_id, tracking_uri, platform, config_file=STUDY_FILE
    )
    container = {
        "name": "report",
        "image": image,
        "command": ["sarl"],
        # $(VAR) is expanded by the kubelet from the container's environment.
        "args": [
            "study",
            "report",
            "$(MLFLOW_RUN_ID)",  # the parent run the operator created, by id
            "--tracking-uri",
            "$(MLFLOW_TRACKING_URI)",
            "--out",
            REPORT_OUT,
            "--finish",  # the Study is over: close its MLflow parent run
        ],
        "env": env,
        "resources": job_pods.pod_resources(base, *REPORT_RESOURCES, gpus=0),
    }
    pod = {"restartPolicy": "Never", **job_pods.job_pod(base, container, REPORT_RESOURCES[2])}
    log_spec = {
        "name": "log-study",
        "image": image,
        "command": ["mlflow", "artifacts", "log-artifact"],
        "args": [
            "--local-file",
            f"{job_pods.CONFIG_DIR}/{STUDY_FILE}",
            "--artifact-path",
            STUDY_ARTIFACT_DIR,
            "--run-id",
            "$(MLFLOW_RUN_ID)",
        ],
        "env": pod["containers"][0]["env"],  # with the scratch volume's TMPDIR
        "resources": pod["containers"][0]["resources"],
        "volumeMounts": pod["containers"][0]["volumeMounts"],
        "securityContext": pod["containers"][0]["securityContext"],
    }
    pod["initContainers"] = [log_spec]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": report_name(study),
            "namespace": namespace,
            "labels": labels(study, "report"),
        },
        "spec": {
            "backoffLimit": REPORT_RETRIES,
            "template": {
                "metadata": {
                    "labels": labels(study, "report"),
                    "annotations": dict(job_pods.JOB_POD_ANNOTATIONS),
                },
                "spec": pod,
            },
        },
    }


# ---- the plan: which runs exist, which finished, which to create next ----


@dataclass(frozen=True)
class RunState:
    """One arm x seed run as observed: whether its Experiment exists (``foreign``: an
    Experiment of that name exists but this Study does not control it) and its outcome."""

    run: StudyRun
    outcome: Outcome = "pending"
    exists: bool = False
    foreign: bool = False

    @property
    def finished(self) -> bool:
        return self.outcome in ("succeeded", "failed")

    @property
    def active(self) -> bool:
        """Counts against ``parallelism``: created by this Study and not finished."""
        return self.exists and not self.foreign and not self.finished


def _condition_status(status: Mapping[str, Any], type_: str) -> str:
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status") or "")
    return ""


def outcome(run: StudyRun, obj: Mapping[str, Any] | None) -> Outcome:
    """The run's outcome from its Experiment's status.

    ``Succeeded`` training with cluster benchmarks is finished only once its evaluation Job
    has (``Evaluated`` True → succeeded, False → failed, else still running: the report needs
    the ``eval/...`` metrics, and the evaluation pod holds a GPU); no Experiment, no phase or
    ``Pending`` → pending.
    """
    status = (obj or {}).get("status") or {}
    phase = status.get("phase")
    if phase == "Failed":
        return "failed"
    if phase == "Succeeded":
        if not evaluation.cluster_benchmarks(run.experiment):
            return "succeeded"
        evaluated = _condition_status(status, "Evaluated")
        if evaluated == "True":
            return "succeeded"
        return "failed" if evaluated == "False" else "running"
    if phase == "Running":
        return "running"
    return "pending"


def run_state(run: StudyRun, obj: Mapping[str, Any] | None, study_uid: str) -> RunState:
    """The :class:`RunState` of ``run`` given its Experiment ``obj`` (None: absent)."""
    if obj is None:
        return RunState(run)
    if not controlled_by(obj, study_uid):
        return RunState(run, exists=True, foreign=True)
    return RunState(run, outcome(run, obj), exists=True)


def to_create(states: Sequence[RunState], parallelism: int | None) -> list[StudyRun]:
    """The runs whose Experiments to create now, in order: the first missing ones, as many as
    keep at most ``parallelism`` (None: all) unfinished Experiments of this Study at once.

    Decided from what exists, never from memory, so calling it again (the timer, a restarted
    operator) creates nothing twice and never exceeds the limit.
    """
    limit = len(states) if parallelism is None else parallelism
    free = max(limit - sum(s.active for s in states), 0)
    return [s.run for s in states if not s.exists][:free]
