"""docs/cluster/air-gapped.md: the paper Study with its documented ``base`` runs with no Hub.

The doc's ``base`` block replaces the base of ``examples/studies/sarl-math.yaml``; for every run
(arm x seed) the operator's children are built (ConfigMap, PyTorchJob, evaluation Job,
InferenceServices, and the Study's shared embedding service) and none names a Hub model: the
policy and the embedding model come from ``s3://``, every trainer and evaluation pod has
``HF_HUB_OFFLINE=1`` and the served embedding model a ``storageUri``. No cluster runs here.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from sarl.spec.loader import load_study
from sarl_operator import builders, evaluation, served_models, study_builders
from tests.operators.cases import IMAGE, NAMESPACE, PLATFORM, ROOT, RUN_ID, TRACKING_URI

DOC = ROOT / "docs" / "cluster" / "air-gapped.md"
HUB_IDS = re.compile(r"\bQwen/Qwen3-(4B|Embedding-0\.6B)\b")


def _study() -> Any:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    (base_block,) = [b for b in blocks if b.lstrip().startswith("base:")]
    doc = yaml.safe_load((ROOT / "examples" / "studies" / "sarl-math.yaml").read_text())
    doc["spec"]["base"] = yaml.safe_load(base_block)["base"]
    return load_study(doc)


def test_every_run_of_the_documented_study_stays_off_the_hub() -> None:
    study = _study()
    runs = study.runs()
    assert len(runs) == 18
    for run in runs:
        exp = run.experiment
        assert exp.spec.model.name == "s3://models/qwen/Qwen3-4B"
        kw: dict[str, Any] = {
            "image": IMAGE, "mlflow_run_id": RUN_ID, "tracking_uri": TRACKING_URI,
            "platform": PLATFORM,
        }  # fmt: skip
        job = builders.pytorchjob(exp, NAMESPACE, **kw)
        eval_job = evaluation.eval_job(exp, NAMESPACE, **kw)
        children = [
            builders.configmap(exp, NAMESPACE, PLATFORM),
            job,
            eval_job,
            *served_models.inference_services(exp, NAMESPACE, PLATFORM),
        ]
        assert not HUB_IDS.search(yaml.safe_dump(children)), run.name
        for pod in (job["spec"]["pytorchReplicaSpecs"]["Master"], eval_job["spec"]):
            env = {
                e["name"]: e.get("value") for e in pod["template"]["spec"]["containers"][0]["env"]
            }
            assert env["HF_HUB_OFFLINE"] == "1", run.name
    shared = study_builders.shared_models(study, NAMESPACE, PLATFORM)
    assert len(shared) == 1  # the structure arms' embedding model, served once for the Study
    model = shared[0].isvc["spec"]["predictor"]["model"]
    assert model["storageUri"] == "s3://models/qwen/Qwen3-Embedding-0.6B/"
    assert not HUB_IDS.search(yaml.safe_dump(shared[0].isvc))
