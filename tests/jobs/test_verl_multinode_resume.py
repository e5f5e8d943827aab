"""A 2-node verl PyTorchJob whose head is killed after a checkpoint resumes on both nodes.

Real: the operator's builders (``configmap``/``pytorchjob`` of a 2-node verl Experiment), the
trainer entrypoint ``sarl_jobs.verl_trainer`` on both replicas (worker restore, ``ray start``,
exit status, end-of-job marker; head restore, node wait), Ray 2.x, verl 0.9.1's config and its
``build_checkpoint_callback``/``find_latest_ckpt_path``, sarl's ``StoreCheckpointCallback``
saving in parts and ``sarl.storage``.

Replaced: verl's ``main_ppo.main`` (the GPU work) by PROBE's ``train``: one Ray task per node
plays that node's FSDP rank, writing ``actor/model_world_size_2_rank_<r>.pt`` to its own pod's
``trainer.default_local_dir`` as verl's checkpoint manager does; the driver writes ``data.pt`` and
the tracker and calls the callback as verl's ``_save_checkpoint`` does; at start it resumes as
``_load_checkpoint`` does (the tracker on the driver's node, each rank's shard on its node: rank
``r`` on the node with the r-th smallest Ray address, the order verl 0.9.1's
``sort_placement_group_by_node_ip`` gives its ranks), and reports which shards each node holds:
the head has each node download only its own (``sarl_jobs.node_restore``). The
first run stops after step 1; the test kills the head there. The store is a local directory
outside ``/tmp`` that every pod sees (a shared mount; the S3 store's parts are tested over HTTP
in ``tests/sarl/storage/test_parts.py``).

Emulated (``pytorchjob_emulator``): the API server, the Training Operator and the kubelet (see
``test_verl_multinode.py``). Runs in ``.venv-verl``; slow (the worker notices the lost head after
Ray's 60 s GCS reconnect timeout).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")
pytest.importorskip("minio")  # sarl.storage

from sarl.spec.experiment import Experiment
from sarl.storage import open_store
from tests.jobs.pytorchjob_emulator import (
    PodNetwork,
    namespaces_unavailable,
    pod_network,
    running_pytorchjob,
)

pytestmark = pytest.mark.slow

NAMESPACE = "research"
MARK = "SARL-PROBE "
PROBE = f"""
import json, os, runpy, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.trainer import main_ppo
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

def shard(folder, rank):
    return os.path.join(folder, "actor", f"model_world_size_2_rank_{{rank}}.pt")

@ray.remote(num_cpus=0)
def save_rank(folder, rank, step):
    os.makedirs(os.path.dirname(shard(folder, rank)), exist_ok=True)
    open(shard(folder, rank), "w").write(f"rank{{rank}}-step{{step}}")

@ray.remote(num_cpus=0)
def load_rank(folder, rank):
    path = shard(folder, rank)
    text = open(path).read() if os.path.exists(path) else None
    return text, sorted(os.listdir(os.path.dirname(path)))

def say(**doc):
    print({MARK!r} + json.dumps(doc), flush=True)

def train(config):
    ray.init(address="auto")
    root = config.trainer.default_local_dir
    alive = [n for n in ray.nodes() if n["Alive"]]
    # Rank r on the node with the r-th smallest address, as verl numbers its ranks.
    nodes = [n["NodeID"] for n in sorted(alive, key=lambda n: n["NodeManagerAddress"])]
    on = [NodeAffinitySchedulingStrategy(n, soft=False) for n in nodes]
    resume = find_latest_ckpt_path(root)
    start = int(resume.rsplit("_", 1)[1]) if resume else 0
    loaded = ray.get([load_rank.options(scheduling_strategy=s).remote(resume, r)
                      for r, s in enumerate(on)]) if resume else []
    say(resumed=start, loaded=[text for text, _ in loaded], files=[f for _, f in loaded])
    callback = build_checkpoint_callback(config)
    for step in range(start + 1, 3):
        folder = os.path.join(root, f"global_step_{{step}}")
        ray.get([save_rank.options(scheduling_strategy=s).remote(folder, r, step)
                 for r, s in enumerate(on)])
        open(os.path.join(folder, "data.pt"), "w").write(f"loader-step{{step}}")
        open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w").write(str(step))
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=folder, async_save=False)
        say(saved=step)
        if start == 0:
            time.sleep(600)  # the test kills this head now
    ray.shutdown()

main_ppo.main = train
runpy.run_module("sarl_jobs.verl_trainer", run_name="__main__", alter_sys=True)
"""
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1", "GRPC_DNS_RESOLVER": "native"}


@pytest.fixture(scope="module")
def builders() -> ModuleType:
    from sarl_operator import builders as module

    return module


@pytest.fixture(scope="module")
def network() -> Iterator[PodNetwork]:
    if (reason := namespaces_unavailable()) is not None:
        pytest.skip(f"replicas need private mount and PID namespaces: {reason}")
    with pod_network("auto") as net:
        yield net


@pytest.fixture
def shared_store() -> Iterator[Path]:
    """A directory outside /tmp (each container gets its own /tmp): every pod sees it."""
    path = Path("/var/tmp") / f"sarl-store-{uuid.uuid4().hex[:8]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def probes(text: str) -> list[dict[str, object]]:
    return [json.loads(x.removeprefix(MARK)) for x in text.splitlines() if x.startswith(MARK)]


def test_a_killed_head_restarts_both_nodes_and_every_rank_resumes_its_shard(
    builders: ModuleType, network: PodNetwork, tmp_path: Path, shared_store: Path
) -> None:
    spec = {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 2}},
        "data": {"train_size": 16, "eval_size": 4},
        "resources": {"backend": "verl", "nodes": 2, "gpus_per_node": 0},
    }
    exp = Experiment.model_validate({"metadata": {"name": "verl-resume"}, "spec": spec})
    job = builders.pytorchjob(
        exp, NAMESPACE, image="sarl-verl:test", mlflow_run_id="", tracking_uri=""
    )
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        (container,) = pod["containers"]
        container["command"] = ["python", "-c", PROBE]  # the args stay: the mounted config
        container["env"].append({"name": "SARL_CHECKPOINT_URI", "value": str(shared_store)})
        # The scratch volume (an emptyDir: TMPDIR, caches, verl's local checkpoints) stays: it
        # outlives a container restart, so a restarted node still holds its stale local copy,
        # and multi-node resume must take the store's complete checkpoint over it.
    master, worker = "verl-resume-master-0", "verl-resume-worker-0"
    with running_pytorchjob(
        job,
        network,
        root=tmp_path / "pods",
        configmaps=[builders.configmap(exp, NAMESPACE)],
        image_env=IMAGE_ENV,
    ) as run:
        run.wait_until(lambda: {"saved": 1} in probes(run.logs(master)), timeout_s=300)
        run.kill(master)  # the head's node is lost after step 1 was committed
        result = run.wait(timeout_s=540)
        head_logs = run.logs(master)
        worker_codes = run.pods[worker].exit_codes
    assert result.condition == "Succeeded", run.describe()
    assert result.exit_codes == {master: 0, worker: 0}
    assert worker_codes[0] == 1, "the worker that lost its head must exit non-zero"
    assert result.restarts[master] == 1 and result.restarts[worker] >= 1
    resumed = probes(head_logs)
    assert resumed[0]["resumed"] == 1, head_logs
    assert resumed[0]["loaded"] == ["rank0-step1", "rank1-step1"], head_logs
    # Each node downloaded only its rank's shard (issue 35 item 9), where verl's rank order is
    # knowable: the pods have addresses of their own.
    rank_files = [f"model_world_size_2_rank_{r}.pt" for r in (0, 1)]
    if network.mode == "netns":
        assert resumed[0]["files"] == [[rank_files[0]], [rank_files[1]]], head_logs
    else:
        assert resumed[0]["files"] == [rank_files, rank_files], head_logs
    assert "restoring step 1 of" in head_logs and "waiting up to" in head_logs, head_logs
    assert {"saved": 2} in resumed
    latest = open_store(str(shared_store)).latest()
    assert latest is not None and latest.step == 2 and latest.metadata["parts"] == 2
    assert [f.path for f in latest.files] == [
        "actor/model_world_size_2_rank_0.pt",
        "actor/model_world_size_2_rank_1.pt",
        "data.pt",
    ]
