"""The whole operator (``kopf run``) keeps serving every tenant when one names a poisonous reward
module (issue 36, item 1).

The operator runs as a subprocess (:mod:`tests.operators.operator_process`) against the
in-memory API server of :mod:`tests.support.kube_server` (no real API server can run here: no
admission, no controllers) and the real MLflow server, with the planted modules of
:mod:`tests.operators.test_tenant_rewards` on its ``PYTHONPATH``. Before the fix the operator
imported the module while validating the spec and ``SystemExit`` ended its process.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

pytest.importorskip("kmock")
from kubernetes import dynamic

from tests.operators.cases import example_doc
from tests.operators.operator_process import (
    Operator,
    client_for,
    condition,
    create,
    running_operator,
    wait_for,
)
from tests.operators.study_cases import small_doc
from tests.operators.test_tenant_rewards import ALLOWED, POISON, SECRET, _imported, _plant
from tests.support.kube_server import (
    EXPERIMENTS,
    PYTORCHJOBS,
    SARL_RESOURCES,
    KubeServer,
    Resource,
    kube_server,
)

STUDIES: Final = Resource("sarl.dev", "v1alpha1", "studies", "Study", subresources=("status",))
NAMESPACE: Final = "team-a"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _plant(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server((*SARL_RESOURCES, STUDIES)) as ks:
        yield ks


@pytest.fixture(scope="module")
def operator(
    server: KubeServer, planted: Path, mlflow_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(planted), os.environ.get("PYTHONPATH")])),
        "SARL_ALLOWED_REWARD_MODULES": ALLOWED,
        "SARL_MLFLOW_TRACKING_URI": mlflow_server.url,
        "SARL_STATUS_INTERVAL_S": "1",
        "SARL_RETRY_DELAY_S": "1",
        "SARL_TRAINER_IMAGE": "ghcr.io/sarl-dev/sarl-verl:test",
        "SARL_S3_BUCKET": "sarl",
    }
    with running_operator(server, NAMESPACE, tmp_path_factory.mktemp("operator"), env) as op:
        yield op


@pytest.fixture(scope="module")
def kube(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> dynamic.DynamicClient:
    return client_for(server, NAMESPACE, tmp_path_factory)


def _experiment(name: str, reward: str) -> dict[str, Any]:
    doc = copy.deepcopy(example_doc())
    doc["metadata"] = {"name": name}
    doc["spec"]["reward"] = [{"name": reward}]
    return doc


def _study(name: str, reward: str) -> dict[str, Any]:
    doc = small_doc(name)
    doc["spec"]["base"]["reward"] = [{"name": reward}]
    return doc


def _status(server: KubeServer, resource: Resource, name: str) -> dict[str, Any]:
    return dict(server.objects(resource, NAMESPACE).get(name, {}).get("status") or {})


def _failed(server: KubeServer, resource: Resource, name: str) -> dict[str, Any] | None:
    status = _status(server, resource, name)
    return condition(status, "Ready") if status.get("phase") == "Failed" else None


def _alive(operator: Operator) -> None:
    assert operator.process is not None and operator.process.poll() is None, operator.log()


@pytest.mark.parametrize("module", sorted(POISON))
def test_a_poisonous_reward_fails_its_object_and_the_operator_keeps_serving(
    operator: Operator,
    server: KubeServer,
    kube: dynamic.DynamicClient,
    planted: Path,
    module: str,
) -> None:
    name = module.replace("_", "-")
    create(kube, NAMESPACE, "Experiment", _experiment(name, f"{module}:Reward"))
    create(kube, NAMESPACE, "Study", _study(f"{name}-st", f"{module}:Reward"))
    ready = wait_for(
        f"Experiment {name} Failed\n{operator.log()}", lambda: _failed(server, EXPERIMENTS, name)
    )
    assert ready["reason"] == "InvalidSpec"
    assert ready["message"].startswith("spec.reward[0].name=")
    assert "operator.allowedRewardModules" in ready["message"] and SECRET not in ready["message"]
    study_ready = wait_for(
        f"Study {name}-st Failed\n{operator.log()}",
        lambda: _failed(server, STUDIES, f"{name}-st"),
    )
    assert "spec.base.reward[0].name=" in study_ready["message"]
    _alive(operator)
    assert _imported(planted) == []
    # Another tenant's Experiment created afterwards still reconciles.
    create(kube, NAMESPACE, "Experiment", _experiment(f"{name}-next", "ground_truth"))
    wait_for(
        f"the next tenant's PyTorchJob\n{operator.log()}",
        lambda: server.objects(PYTORCHJOBS, NAMESPACE).get(f"{name}-next"),
    )
    _alive(operator)


def test_an_allow_listed_reward_runs_without_the_operator_importing_it(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, planted: Path
) -> None:
    create(kube, NAMESPACE, "Experiment", _experiment("listed", f"{ALLOWED}.math:Score"))
    job = wait_for(
        f"the PyTorchJob of the allow-listed reward\n{operator.log()}",
        lambda: server.objects(PYTORCHJOBS, NAMESPACE).get("listed"),
    )
    assert job["metadata"]["name"] == "listed"
    assert _imported(planted) == []
    _alive(operator)
