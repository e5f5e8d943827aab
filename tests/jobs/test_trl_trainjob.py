"""A 2-node CPU TRL job run as a Kubeflow Trainer v2 TrainJob trains over gloo, checkpoints, and
resumes after its node 0 is killed.

The TrainJob twin of ``test_trl_multinode.py`` (its fixtures and helpers: the MLflow and S3
servers, the Experiment cut to seconds): real are the operator's builders (``configmap`` and
``sarl_operator.trainjob.trainjob``), the trainer entrypoint on both pods (torchrun over gloo,
its rendezvous at ``PET_MASTER_ADDR:PET_MASTER_PORT`` = ``<name>-node-0-0.<name>:29500`` with no
``MASTER_ADDR`` or ``RANK`` set), MLflow and S3. Emulated (``trainjob_emulator``): Kubeflow
Trainer v2.3.0 resolving the TrainJob against the ``sarl-torch-distributed``
ClusterTrainingRuntime into a JobSet, JobSet v0.12.0 and the Job controller (indexed pods,
hostnames in the headless Service, in-place OnFailure restarts) and the kubelet. One test, train
and resume together, to keep CI time small; skipped without root, as its twin is.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("moto")

from sarl_operator import builders
from sarl_operator.tracking import MlflowTracking
from sarl_operator.trainjob import trainjob
from tests.jobs import test_trl_multinode as twin
from tests.jobs.pytorchjob_emulator import PodNetwork
from tests.jobs.test_trl_multinode import (
    ACCESS_KEY,
    IMAGE_ENV,
    JOB_TIMEOUT_S,
    NAMESPACE,
    SECRET,
    SECRET_KEY,
    _kill_after_first_upload,
    experiment,
    history,
    platform,
    store_of,
)
from tests.jobs.trainjob_emulator import running_trainjob
from tests.jobs.trainjob_emulator.sarl import sarl_runtime

pytestmark = pytest.mark.slow

# The twin's fixtures (module-scoped: this module gets its own servers and pod network).
network, s3, mlflow_url = twin.network, twin.s3, twin.mlflow_url
_s3_credentials = twin._s3_credentials


def test_two_cpu_nodes_train_and_resume_as_a_trainjob(
    network: PodNetwork, s3: str, mlflow_url: str, tmp_path: Path
) -> None:
    exp = experiment("trl-trainjob", max_steps=4)
    head, other = "trl-trainjob-node-0-0", "trl-trainjob-node-0-1"
    store = store_of(exp, s3)
    run_id = (
        MlflowTracking(mlflow_url)
        .ensure_run(exp.name, run_name=exp.name, namespace=NAMESPACE, uid=str(uuid.uuid4()))
        .run_id
    )
    job = trainjob(
        exp,
        NAMESPACE,
        image="sarl-trl:test",
        mlflow_run_id=run_id,
        tracking_uri=mlflow_url,
        platform=platform(s3),
    )
    with running_trainjob(
        job,
        sarl_runtime(),
        network,
        root=tmp_path / "pods",
        configmaps=[builders.configmap(exp, NAMESPACE, platform(s3))],
        secrets={SECRET: {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}},
        image_env=IMAGE_ENV,
    ) as run:
        env = run.pods[other].replica.env
        uploaded, killed_ms = _kill_after_first_upload(run, store, head)
        result = run.wait(timeout_s=JOB_TIMEOUT_S)
    assert (result.condition, result.reason) == ("Complete", "AllJobsCompleted"), run.describe()
    # The Trainer's environment only: the trainer found its rank and master from PET_*.
    assert not {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"} & set(env)
    assert (env["PET_NODE_RANK"], env["PET_MASTER_ADDR"]) == (
        "1",
        "trl-trainjob-node-0-0.trl-trainjob",
    )
    assert 0 < uploaded < 4, "node 0 must die mid-run, after an upload"
    # The chart's runtime (restartPolicy Never, backoffLimit 0, failurePolicy.maxRestarts): the
    # killed node fails its Job and JobSet recreates both nodes once, with fresh scratch volumes;
    # both resume from the store and every index exits 0 (JobSet's success policy All).
    assert result.jobset_restarts == 1
    assert result.restarts == {head: 1, other: 1}
    assert result.exit_codes == {head: 0, other: 0}
    steps = history(mlflow_url, run_id, "reward")
    after = [step for step, at in steps if at > killed_ms]
    # Resumed from a stored step: the one seen at the kill, or a later one whose upload was in
    # flight then and completed as node 0 died (a loaded machine; CI saw 2 then 3), as the twin.
    resumed = min(after) - 1
    assert uploaded <= resumed < 4, (uploaded, steps)
    assert [step for step, _ in steps if step <= resumed] == list(range(1, resumed + 1))
    assert max(after) == 4
    latest = store.latest()
    assert latest is not None and latest.step == 4
