"""``sarl submit --dry-run`` and ``sarl render`` print exactly what the operator's builders
produce, with no cluster (issue 40 item 3).

The real command runs in a subprocess with no kubeconfig (``KUBECONFIG`` unset, ``HOME`` an
empty directory) and every proxy pointed at a closed local port, so any attempt to reach a
cluster or the network would fail the run. The expected objects are composed here from the
builder functions the handlers call (``study_builders``, ``builders``, ``served_models``,
``network_policies``, ``trainjob``, ``evaluation``), with the operator's default settings, the
default namespace and an empty MLflow run id (the operator creates the run first).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sarl.cluster.documents import load_study_for_cluster, study_body
from sarl.rewards.cluster_names import validating_for_cluster
from sarl.spec.experiment import Experiment
from sarl.spec.loader import SpecError
from sarl.spec.study import Study
from sarl_operator import builders, evaluation, served_models, study_builders, trainjob
from sarl_operator.experiment_handlers import experiment_from_body
from sarl_operator.network_policies import network_policies
from sarl_operator.reconcile import Settings
from tests.operators.cases import ROOT

STUDY = ROOT / "examples" / "studies" / "sarl-math.yaml"
CUSTOM = ROOT / "examples" / "custom_reward" / "cluster.yaml"
SETTINGS = Settings()
NS = "default"


def _sarl(tmp_path: Path, *args: str, python: bool = False) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    closed = "http://127.0.0.1:9"  # discard port: nothing listens
    env.update(HOME=str(home), HTTP_PROXY=closed, HTTPS_PROXY=closed, NO_PROXY="")
    env.update(http_proxy=closed, https_proxy=closed, no_proxy="")
    return subprocess.run(
        [sys.executable, *args] if python else [sys.executable, "-m", "sarl.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def _children(
    exp: Experiment, kind: str = "TrainJob", settings: Settings = SETTINGS
) -> list[dict[str, Any]]:
    """An Experiment's objects in the order reconcile applies them, then the evaluation Job,
    built with the operator's ``settings``."""
    platform = settings.platform
    services = [
        builders.configmap(exp, NS, platform),
        *served_models.inference_services(exp, NS, platform),
    ]
    served = any(s["kind"] == "InferenceService" for s in services)
    kwargs: dict[str, Any] = {
        "image": settings.image_of(exp),
        "mlflow_run_id": "",
        "tracking_uri": settings.tracking_uri_of(exp),
        "platform": platform,
    }
    job = (
        trainjob.trainjob(exp, NS, **kwargs)
        if kind == "TrainJob"
        else builders.pytorchjob(exp, NS, **kwargs)
    )
    eval_jobs = (
        [evaluation.eval_job(exp, NS, **kwargs)] if evaluation.cluster_benchmarks(exp) else []
    )
    return [*network_policies(exp, NS, platform, served), *services, job, *eval_jobs]


def _expected_study(study: Study, spec: dict[str, Any]) -> list[dict[str, Any]]:
    platform = SETTINGS.platform
    out = [study_body(study, NS, spec), study_builders.configmap(study, NS)]
    out += [m.isvc for m in study_builders.shared_models(study, NS, platform)]
    for obj in study_builders.experiments(study, NS, "", platform):
        with validating_for_cluster(None):
            out += [obj, *_children(experiment_from_body(obj, platform))]
    base = study_builders.base_experiment(study, NS)
    out.append(
        study_builders.report_job(
            study,
            NS,
            image=SETTINGS.image_of(base),
            parent_run_id="",
            tracking_uri=SETTINGS.tracking_uri_of(base),
            platform=platform,
        )
    )
    return out


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_submit_dry_run_prints_every_object_of_every_arm_without_a_cluster(tmp_path: Path) -> None:
    proc = _sarl(tmp_path, "submit", "--dry-run", str(STUDY))
    assert proc.returncode == 0, proc.stderr[-2000:]
    study, spec = load_study_for_cluster(STUDY)
    assert _documents(proc.stdout) == _expected_study(study, spec)
    kinds = [d["kind"] for d in _documents(proc.stdout)]
    runs = len(study.runs())
    assert (kinds.count("Experiment"), kinds.count("TrainJob"), runs) == (18, 18, 18)
    assert "# dry run: nothing was created" in proc.stdout
    assert "# Resource plan of Study sarl-math: 18 runs, 2 at once" in proc.stdout
    assert "&id" not in proc.stdout  # no YAML anchors: every object reads on its own


def test_render_json_is_a_list_of_the_same_objects(tmp_path: Path) -> None:
    as_yaml = _sarl(tmp_path, "render", str(STUDY))
    as_json = _sarl(tmp_path, "render", str(STUDY), "--output", "json")
    assert as_yaml.returncode == as_json.returncode == 0, as_json.stderr[-2000:]
    listed = json.loads(as_json.stdout)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert listed["items"] == _documents(as_yaml.stdout)
    assert "Resource plan" not in as_yaml.stdout  # render prints objects only (kubectl -f -)


def test_render_the_pytorchjob_kind(tmp_path: Path) -> None:
    proc = _sarl(tmp_path, "render", str(STUDY), "--job-kind", "PyTorchJob", "-n", NS)
    assert proc.returncode == 0, proc.stderr[-2000:]
    docs = _documents(proc.stdout)
    jobs = [d for d in docs if d["kind"] == "PyTorchJob"]
    first = next(d for d in docs if d["kind"] == "Experiment")
    with validating_for_cluster(None):
        exp = experiment_from_body(first, SETTINGS.platform)
    assert len(jobs) == 18 and jobs[0] == _children(exp, "PyTorchJob")[-2]


def test_a_custom_reward_renders_without_its_package(tmp_path: Path) -> None:
    """The example's cluster spec names its reward by path; the package is not installed
    here, and rendering must not need it: the operator never imports what a spec names."""
    proc = _sarl(tmp_path, "render", str(CUSTOM))
    assert proc.returncode == 0, proc.stderr[-2000:]
    docs = _documents(proc.stdout)
    (job,) = [d for d in docs if d["kind"] == "TrainJob"]
    absent = _sarl(tmp_path, "-c", "import answer_length_reward", python=True)
    assert "No module named 'answer_length_reward'" in absent.stderr  # not installed here
    assert set(_images(job)) == {"registry.example.com/team/sarl-verl-answer-length:0.1.0"}


def _images(obj: Any) -> list[str]:
    """Every ``image`` value anywhere in ``obj``."""
    if isinstance(obj, dict):
        own = [obj["image"]] if isinstance(obj.get("image"), str) else []
        return own + [i for v in obj.values() for i in _images(v)]
    if isinstance(obj, list):
        return [i for v in obj for i in _images(v)]
    return []


@pytest.mark.parametrize(("allowed", "ok"), [((), False), (("answer_length_reward",), True)])
def test_the_operator_takes_the_custom_reward_only_where_the_platform_allows_it(
    allowed: tuple[str, ...], ok: bool
) -> None:
    body = yaml.safe_load(CUSTOM.read_text())
    body["metadata"]["namespace"] = NS
    with validating_for_cluster(allowed):
        if ok:
            assert experiment_from_body(body).spec.reward[1].settings == {"target": 400}
        else:
            with pytest.raises(SpecError, match="operator.allowedRewardModules"):
                experiment_from_body(body)


def test_an_invalid_spec_is_one_line_naming_the_field(tmp_path: Path) -> None:
    proc = _sarl(tmp_path, "render", str(STUDY), "--set", "spec.base.algorithm.nme=grpo")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "nme" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
