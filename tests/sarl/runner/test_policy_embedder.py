"""A local run whose structure reward embeds steps with the policy being trained
(``embedder.kind: policy``, SARL v1 A.1 Implementation A): real TRL GRPO, two steps, tiny model.
"""

from __future__ import annotations

import pytest

from sarl.runner.local import LocalOptions, run_local
from sarl.runner.threads import one_torch_thread
from tests.sarl.embedding import tiny_policy

pytest.importorskip("trl")
mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow


def test_grpo_with_the_policy_embedder_logs_the_structure_reward(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tiny_policy.prepare(tmp_path_factory)  # shared with the embedder tests: built once
    workdir = tiny_policy.workdir(tmp_path_factory)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    exp = tiny_policy.tiny_experiment("policy-embedder-run")
    with one_torch_thread():
        result = run_local(exp, LocalOptions(workdir=workdir, tracking_uri=uri, progress=False))
    client = mlflow.MlflowClient(uri)
    assert client.get_run(result.run_id).info.status == "FINISHED"
    assert result.steps == 2
    for metric in ("reward/structure", "structure/score", "structure/num_steps"):
        assert [m.step for m in client.get_metric_history(result.run_id, metric)] == [1, 2]
    # The warm-started policy writes <think> steps: the policy embedder had steps to embed.
    steps = client.get_metric_history(result.run_id, "structure/num_steps")
    assert max(m.value for m in steps) > 1
    # Reasoning maps are drawn from the recorded completion ids, with the same embedder.
    assert client.list_artifacts(result.run_id, "maps/step-000001")
