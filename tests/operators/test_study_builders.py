"""Study builders: golden YAML of what the operator creates for examples/studies/sarl-math.yaml,
the fan-out (names, labels, MLflow tags, owner references), the report Job, and the plan of which
runs to create under ``parallelism``. Pure functions: no API server involved."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sarl.integrations.cluster import check_cluster
from sarl.spec.loader import load_experiment, load_study
from sarl.spec.study import Study, StudyRun
from sarl_operator import experiment_handlers, served_models, study_builders
from sarl_operator.study_builders import RunState
from tests.operators.cases import NAMESPACE
from tests.operators.study_cases import (
    EXAMPLE,
    PARENT_RUN_ID,
    STUDY_UID,
    golden_files,
    small_doc,
    study,
    study_children,
)

PAPER_ARMS = ["grpo-ground-truth", "grpo-sarl", "ppo-ground-truth", "ppo-sarl", "ttrl", "empo"]


@pytest.mark.parametrize("path", sorted(golden_files()), ids=lambda p: p.name)
def test_golden(path: Any) -> None:
    assert path.read_text(encoding="utf-8") == golden_files()[path], (
        "stale golden file: run python tests/operators/regenerate_golden.py and review the diff"
    )


def test_example_is_the_papers_math_comparison() -> None:
    s = load_study(EXAMPLE)
    assert [a.name for a in s.spec.arms] == PAPER_ARMS
    assert (s.spec.seeds, s.spec.parallelism, s.spec.reference_arm) == (
        [0, 1, 2],
        2,
        "grpo-ground-truth",
    )
    runs = {(r.arm, r.seed): r.experiment.spec for r in s.runs(PARENT_RUN_ID)}
    assert len(runs) == 18
    for (arm, _), spec in runs.items():
        assert spec.model.name == "Qwen/Qwen3-4B"
        assert spec.evaluation.benchmarks == ["math500", "aime25", "amc23", "minerva"]
        assert spec.evaluation.k == 8
        assert spec.algorithm.name == ("ppo" if arm.startswith("ppo") else "grpo")
    rewards = {arm: runs[(arm, 0)].reward[0] for arm in PAPER_ARMS}
    assert {arm: r.name for arm, r in rewards.items()} == {
        "grpo-ground-truth": "ground_truth",
        "grpo-sarl": "structure",
        "ppo-ground-truth": "ground_truth",
        "ppo-sarl": "structure",
        "ttrl": "ttrl",
        "empo": "empo",
    }
    assert rewards["grpo-sarl"].settings["clustering"] == "kmeans"
    ppo_preset = load_experiment(
        {
            "apiVersion": "sarl.dev/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "p"},
            "spec": {"preset": "paper-ppo-math"},
        }
    ).spec.algorithm
    assert runs[("ppo-sarl", 0)].algorithm == ppo_preset.model_copy(update={"seed": 0})


@pytest.mark.parametrize(
    "run", load_study(EXAMPLE).runs(PARENT_RUN_ID), ids=lambda r: f"{r.arm}-s{r.seed}"
)
def test_every_example_run_passes_the_cluster_checks(run: StudyRun) -> None:
    check_cluster(run.experiment)  # what the operator's reconcile (and sarl submit) checks


def _small(seeds: int = 2) -> Study:
    return study(small_doc("fan", seeds=seeds))


def test_fan_out_names_labels_tags_and_owner() -> None:
    s = _small()
    objs = [
        study_builders.owned(o, {"name": "fan", "uid": STUDY_UID})
        for o in study_builders.experiments(s, NAMESPACE, PARENT_RUN_ID)
    ]
    assert [o["metadata"]["name"] for o in objs] == [
        "fan-low-s0",
        "fan-high-s0",
        "fan-low-s1",
        "fan-high-s1",
    ]
    for obj, (arm, seed, colour) in zip(
        objs,
        [
            ("low", 0, "#0072B2"),
            ("high", 0, "#E69F00"),
            ("low", 1, "#0072B2"),
            ("high", 1, "#E69F00"),
        ],
        strict=True,
    ):
        assert obj["kind"] == "Experiment" and obj["metadata"]["namespace"] == NAMESPACE
        assert obj["metadata"]["labels"] == {
            "sarl.dev/study": "fan",
            "sarl.dev/arm": arm,
            "sarl.dev/seed": str(seed),
        }
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "sarl.dev/v1alpha1",
                "kind": "Study",
                "name": "fan",
                "uid": STUDY_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        tracking = obj["spec"]["tracking"]
        assert tracking["experiment_name"] == "fan"
        assert tracking["tags"] == {
            "mlflow.runColor": colour,  # the arm's colour in MLflow's chart view (issue 40)
            "sarl.study": "fan",
            "arm": arm,
            "seed": str(seed),
            "sarl.role": "arm",
            "mlflow.parentRunId": PARENT_RUN_ID,
        }
        assert obj["spec"]["algorithm"]["seed"] == seed
        # The Experiment handlers accept what the Study creates.
        assert experiment_handlers.experiment_from_body(obj).name == obj["metadata"]["name"]


def test_children_are_all_owned_by_the_study_and_built_twice_equal() -> None:
    s = study()
    children = study_children(s)
    assert study_children(s) == children
    # One shared embedding service per distinct served embedder, however many runs call it.
    shared = ["InferenceService"] * len(study_builders.shared_models(s, NAMESPACE))
    assert shared in ([], ["InferenceService"])
    assert [c["kind"] for c in children] == ["ConfigMap", *shared, *["Experiment"] * 18, "Job"]
    for child in children:
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("Study", STUDY_UID, True)


def test_report_job_runs_sarl_study_report_into_the_parent_run() -> None:
    s = study()
    job = study_builders.report_job(
        s, NAMESPACE, image="img:1", parent_run_id="parent-1", tracking_uri="http://mlflow:5000"
    )
    assert job["metadata"]["name"] == "sarl-math-report"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["sarl"] and container["image"] == "img:1"
    assert container["args"] == [
        "study",
        "report",
        "$(MLFLOW_RUN_ID)",  # the parent run by id, never a Study name
        "--tracking-uri",
        "$(MLFLOW_TRACKING_URI)",
        "--out",
        "/tmp/report",
        "--finish",
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLFLOW_RUN_ID"] == "parent-1" and env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert env["SARL_CONFIG"] == "/etc/sarl/study.yaml"
    assert "nvidia.com/gpu" not in str(container["resources"])  # the report needs no GPU
    assert pod["restartPolicy"] == "Never"
    # First the Study document goes where the report reads arm order and reference arm from.
    (init,) = pod["initContainers"]
    assert init["command"] == ["mlflow", "artifacts", "log-artifact"]
    assert init["args"] == [
        "--local-file",
        "/etc/sarl/study.yaml",
        "--artifact-path",
        "spec",
        "--run-id",
        "$(MLFLOW_RUN_ID)",
    ]
    assert init["env"] == container["env"] and init["volumeMounts"] == container["volumeMounts"]
    assert pod["volumes"][0] == {"name": "config", "configMap": {"name": "sarl-math-config"}}
    assert study_builders.report_uri("parent-1") == "runs:/parent-1/report/"


def test_configmap_holds_what_the_report_reads_and_nothing_free_form() -> None:
    """The report Job logs ``study.yaml`` to MLflow: only allow-listed fields (issue 38 item 8),
    still a valid Study with the arms, reference, seeds and k the report reads."""
    s = study()
    prompt = s.spec.base.data.prompt_template + " note: Vb7Qm2Kx9Lp4Rt8Wz3Nc6"
    data_spec = s.spec.base.data.model_copy(update={"prompt_template": prompt})
    s = s.model_copy(
        update={
            "spec": s.spec.model_copy(
                update={"base": s.spec.base.model_copy(update={"data": data_spec})}
            )
        }
    )
    text = study_builders.configmap(s, NAMESPACE)["data"]["study.yaml"]
    stored = load_study(text)
    assert "Vb7Qm2Kx9Lp4Rt8Wz3Nc6" not in text
    assert [a.name for a in stored.spec.arms] == [a.name for a in s.spec.arms]
    assert stored.spec.reference_arm == s.spec.reference_arm and stored.spec.seeds == s.spec.seeds
    assert stored.spec.base.evaluation.k == s.spec.base.evaluation.k


def _status(phase: str | None, evaluated: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if evaluated:
        status["conditions"] = [{"type": "Evaluated", "status": evaluated}]
    return {
        "metadata": {"ownerReferences": [{"uid": STUDY_UID, "controller": True}]},
        "status": status,
    }


@pytest.mark.parametrize(
    ("obj", "benchmarks", "expected"),
    [
        (None, False, "pending"),
        (_status(None), False, "pending"),
        (_status("Pending"), False, "pending"),
        (_status("Queued"), False, "pending"),  # waiting for Kueue: not started
        (_status("Running"), False, "running"),
        (_status("Failed"), True, "failed"),
        (_status("Succeeded"), False, "succeeded"),
        # With cluster benchmarks a run is finished once its evaluation Job is.
        (_status("Succeeded"), True, "running"),
        (_status("Succeeded", "Unknown"), True, "running"),
        (_status("Succeeded", "True"), True, "succeeded"),
        (_status("Succeeded", "False"), True, "failed"),
    ],
)
def test_outcome(obj: dict[str, Any] | None, benchmarks: bool, expected: str) -> None:
    run = (study() if benchmarks else _small()).runs()[0]
    assert study_builders.run_state(run, obj, STUDY_UID).outcome == expected


def test_an_experiment_the_study_does_not_control_is_foreign() -> None:
    run = _small().runs()[0]
    other = {"metadata": {"ownerReferences": [{"uid": "someone-else", "controller": True}]}}
    state = study_builders.run_state(run, other, STUDY_UID)
    assert state.exists and state.foreign and not state.active and state.outcome == "pending"


def _states(s: Study, outcomes: Sequence[str | None]) -> list[RunState]:
    """RunStates for the runs of ``s``: None = no Experiment yet, else its outcome."""
    return [
        RunState(run) if out is None else RunState(run, out, exists=True)  # type: ignore[arg-type]
        for run, out in zip(s.runs(), outcomes, strict=True)
    ]


@pytest.mark.parametrize(
    ("outcomes", "parallelism", "expected"),
    [
        ([None, None, None, None], None, [0, 1, 2, 3]),
        ([None, None, None, None], 1, [0]),
        ([None, None, None, None], 2, [0, 1]),
        (["pending", None, None, None], 1, []),  # created, no phase yet: holds the slot
        (["running", None, None, None], 2, [1]),
        (["succeeded", None, None, None], 1, [1]),
        (["failed", "running", None, None], 2, [2]),
        (["running", "running", None, None], 2, []),
        (["succeeded", "succeeded", "succeeded", "failed"], 1, []),
    ],
)
def test_to_create_keeps_at_most_parallelism_unfinished(
    outcomes: list[str | None], parallelism: int | None, expected: list[int]
) -> None:
    s = _small()
    runs = s.runs()
    got = study_builders.to_create(_states(s, outcomes), parallelism)
    assert [r.name for r in got] == [runs[i].name for i in expected]


def _served(doc: dict[str, Any], model: str = "Qwen/Qwen3-Embedding-0.6B") -> dict[str, Any]:
    """``doc`` whose base reward calls an embedder the operator serves (url empty)."""
    embedder = {"kind": "openai", "model": model, "url": ""}
    reward = [{"name": "structure", "settings": {"clustering": "kmeans", "embedder": embedder}}]
    doc["spec"]["base"]["reward"] = reward
    return doc


def test_runs_with_one_served_embedder_share_one_service() -> None:
    s = study(_served(small_doc("fan")))
    [model] = study_builders.shared_models(s, NAMESPACE)
    assert model.name.startswith("fan-emb-") and len(model.name) == len("fan-emb-") + 8
    assert model.runs == tuple(r.name for r in s.runs()) and not model.keep
    assert model.isvc["metadata"]["labels"]["sarl.dev/study"] == "fan"
    assert "sarl.dev/experiment" not in model.isvc["metadata"]["labels"]
    for obj in study_builders.experiments(s, NAMESPACE, PARENT_RUN_ID):
        embedder = obj["spec"]["reward"][0]["settings"]["embedder"]
        assert (embedder["url"], embedder["model"]) == (model.url, "embedding")
        exp = experiment_handlers.experiment_from_body({**obj, "metadata": {**obj["metadata"]}})
        assert served_models.inference_services(exp, NAMESPACE) == []


def test_a_different_serving_spec_is_another_service() -> None:
    doc = _served(small_doc("fan", seeds=1))
    doc["spec"]["arms"][1]["override"]["serving"] = {"embedding": {"gpus": 2}}
    models = study_builders.shared_models(study(doc), NAMESPACE)
    assert [m.runs for m in models] == [("fan-low-s0",), ("fan-high-s0",)]
    assert len({m.name for m in models}) == 2


@pytest.mark.parametrize(
    ("outcomes", "release", "needed"),
    [
        ([None, None, None, None], "on_completion", True),
        (["succeeded", "failed", "running", None], "on_completion", True),
        (["succeeded", "failed", "succeeded", "succeeded"], "on_completion", False),
        (["succeeded", "failed", "succeeded", "succeeded"], "never", True),
    ],
)
def test_a_shared_service_is_needed_until_its_last_run_ends(
    outcomes: list[str | None], release: str, needed: bool
) -> None:
    doc = _served(small_doc("fan"))
    doc["spec"]["base"]["serving"] = {"release": release}
    s = study(doc)
    [model] = study_builders.shared_models(s, NAMESPACE)
    assert study_builders.needed(model, _states(s, outcomes)) is needed
