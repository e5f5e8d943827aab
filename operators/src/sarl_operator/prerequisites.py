"""What a cluster needs besides the sarl charts, at the versions the project is read and
tested against: the one place those versions and install commands are written.

Used by :mod:`sarl_operator.experiment_handlers` (``REQUIREMENTS``: what an Experiment's
``<Kind>Unavailable`` status tells the user to install) and checked against
docs/tutorials/first-cluster-run.md and docs/cluster/install.md by
``tests/operators/test_prerequisites_doc.py``. The install commands follow each project's own
install guide at that tag (Training Operator ``manifests/overlays/standalone``, Trainer
``manifests/overlays/manager``, cert-manager's and KServe's release manifests, Kueue's
``manifests.yaml``: kubernetes-sigs/kueue site/content/en/docs/installation/_index.md).
"""

from __future__ import annotations

from typing import Final

from sarl_operator import trainjob

TRAINING_OPERATOR: Final = "v1.9.0"
TRAINER: Final = "v2.3.0"
KSERVE: Final = "v0.17.0"
#: The minimum KServe's installation guide names for its webhooks' certificates (1.15.0).
CERT_MANAGER: Final = "v1.15.0"
KUEUE: Final = "v0.19.2"

#: Component -> the commands that install it (Kueue is optional: queues and quota).
INSTALL: Final[dict[str, str]] = {
    "Training Operator": "kubectl apply --server-side -k "
    f'"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={TRAINING_OPERATOR}"',
    "Trainer": "kubectl apply --server-side -k "
    f'"github.com/kubeflow/trainer.git/manifests/overlays/manager?ref={TRAINER}"',
    "cert-manager": "kubectl apply -f https://github.com/cert-manager/cert-manager/releases/"
    f"download/{CERT_MANAGER}/cert-manager.yaml",
    "KServe": "kubectl apply --server-side -f https://github.com/kserve/kserve/releases/download/"
    f"{KSERVE}/kserve.yaml\nkubectl apply --server-side -f https://github.com/kserve/kserve/"
    f"releases/download/{KSERVE}/kserve-cluster-resources.yaml",
    "Kueue": "kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/"
    f"download/{KUEUE}/manifests.yaml",
}

#: What to install when the cluster does not serve a child's kind (status messages).
REQUIREMENTS: Final[dict[str, str]] = {
    "PyTorchJob": "the Kubeflow Training Operator v1.7 or later "
    f"({TRAINING_OPERATOR} tested), e.g. {INSTALL['Training Operator']}",
    "TrainJob": f"Kubeflow Trainer {TRAINER}, e.g. {INSTALL['Trainer']}, and the "
    f"ClusterTrainingRuntime {trainjob.RUNTIME_NAME} of the sarl-platform chart "
    "(trainer.v2.runtime.enabled: true)",
    "InferenceService": f"KServe {KSERVE.rsplit('.', 1)[0]} or later with its huggingface "
    "ServingRuntime (the operator serves embedding/judge models with vLLM --runner=pooling)",
}
