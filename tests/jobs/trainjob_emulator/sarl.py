"""ClusterTrainingRuntimes for the emulator: sarl's ``sarl-torch-distributed`` as the platform
chart renders it (``charts/sarl-platform/templates/trainingruntime.yaml``, with the real Helm
engine of ``tests/charts/rendering.py``; the tests that need it skip where that engine is not
installed, as in the verl environment), and :func:`upstream_shaped_runtime`, a runtime shaped as
Trainer v2.3.0's own ``torch-distributed`` for the emulator's tests of upstream behaviour.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any, Final

import yaml

from sarl_operator.trainjob import RUNTIME_NAME

TEMPLATE: Final = "templates/trainingruntime.yaml"


def upstream_shaped_runtime() -> dict[str, Any]:
    """A ClusterTrainingRuntime shaped as v2.3.0's ``torch-distributed``
    (``charts/kubeflow-trainer/files/runtimes/torch-distributed.yaml``) with a Job
    ``backoffLimit``, ``restartPolicy: OnFailure`` and a memory-backed /dev/shm: the base the
    emulator's own tests vary."""
    node = {
        "name": "node",
        "image": "sarl-trainer:placeholder",
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    pod = {
        "restartPolicy": "OnFailure",
        "containers": [node],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    replicated_job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"backoffLimit": 6, "template": {"spec": pod}},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME_NAME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [replicated_job]}},
        },
    }


@cache
def chart_runtime() -> dict[str, Any]:
    """The platform chart's runtime with its default values (skips the test without Helm)."""
    import pytest

    pytest.importorskip("helm_python")
    from tests.charts.rendering import API_SETS, render_templates

    # As on a cluster that serves Trainer v2 (the chart renders the runtime only there).
    rendered = render_templates("sarl-platform", None, API_SETS["trainer-v2"])
    text = rendered[f"sarl-platform/{TEMPLATE}"]
    (runtime,) = [d for d in yaml.safe_load_all(text) if d]
    return dict(runtime)


def sarl_runtime() -> dict[str, Any]:
    """The runtime the operator's TrainJobs refer to: the chart's."""
    return copy.deepcopy(chart_runtime())
