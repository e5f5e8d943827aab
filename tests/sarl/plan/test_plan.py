"""The plan of the paper's Study and of specs that do not fit: numbers, fields, fixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.cluster.documents import load_for_cluster, load_study_for_cluster
from sarl.plan import (
    check_plan,
    check_study_plan,
    plan_experiment,
    plan_study,
    store_capacity_from_env,
)
from sarl.plan.units import parse_quantity
from sarl.spec.loader import SpecError, load_study, validate_document

ROOT = Path(__file__).resolve().parents[3]
PAPER_STUDY = ROOT / "examples" / "studies" / "sarl-math.yaml"


def _paper(algorithm: dict[str, object] | None = None, **spec: object) -> dict[str, object]:
    body: dict[str, object] = {"preset": "paper-grpo-math", **spec}
    if algorithm is not None:
        body["algorithm"] = algorithm
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "paper"},
        "spec": body,
    }


def test_every_arm_of_the_paper_study_fits_an_h100_node() -> None:
    plan = plan_study(load_study(PAPER_STUDY))
    assert len(plan.runs) == 18
    for arm, _, run in plan.runs:
        assert run.misfits == [], arm
        training, rollout = run.phases
        assert training.total < 0.9 * 80 * 2**30
        assert rollout.total <= 80 * 2**30
        assert run.kv_cache_tokens is not None and run.kv_cache_tokens >= 1024 + 8192
        assert run.steps == 45  # 15 epochs x floor(933 AIME problems / 256)
    # ~3.7 TiB: 12 GRPO runs x 3 x 56 GB + 6 PPO runs x 3 x 105 GB, 2 uploading.
    assert plan.store_bytes is not None and 3.5 < plan.store_bytes / 2**40 < 4.0


def test_todays_preset_is_refused_with_its_numbers() -> None:
    exp = validate_document(_paper({"max_tokens_per_gpu": None}), "test")
    plan = plan_experiment(exp)
    (misfit,) = plan.misfits
    assert misfit.field == "spec.algorithm.micro_batch_size_per_gpu"
    assert misfit.need / 2**30 > 300  # 294,912 tokens a pass: logits alone ~250 GiB
    message = misfit.message()
    assert "72.0 GiB" in message and "max_tokens_per_gpu to at most 51,200" in message
    with pytest.raises(SpecError, match="micro_batch_size_per_gpu.*does not fit|does not fit"):
        load_for_cluster(_paper({"max_tokens_per_gpu": None}))


def test_the_suggested_budget_fits_and_one_above_it_does_not() -> None:
    fits = plan_experiment(validate_document(_paper({"max_tokens_per_gpu": 51200}), "t"))
    over = plan_experiment(validate_document(_paper({"max_tokens_per_gpu": 53248}), "t"))
    assert fits.misfits == []
    assert [c.field for c in over.misfits] == ["spec.algorithm.max_tokens_per_gpu"]


def test_a_smaller_gpu_and_a_greedy_vllm_share_are_refused() -> None:
    small = plan_experiment(validate_document(_paper(resources={"gpu_memory": "40Gi"}), "t"))
    assert "spec.algorithm.max_tokens_per_gpu" in [c.field for c in small.misfits]
    greedy = plan_experiment(
        validate_document(_paper({"rollout_gpu_memory_utilization": 0.95}), "t")
    )
    (misfit,) = greedy.misfits
    assert misfit.field == "spec.algorithm.rollout_gpu_memory_utilization"
    assert "at most 0.86" in misfit.fix


def test_scratch_disk_too_small_names_the_size_needed() -> None:
    exp = validate_document(_paper(resources={"scratch_size": "100Gi"}), "t")
    (misfit,) = plan_experiment(exp).misfits
    assert misfit.field == "spec.resources.scratch_size"
    assert misfit.fix == "set it to at least 195Gi"


def test_the_bundled_store_is_refused_for_the_paper_study() -> None:
    study = load_study(PAPER_STUDY)
    with pytest.raises(ValueError, match=r"needs 3\.\d\d TiB, has 20\.0 GiB"):
        check_study_plan(study, parse_quantity("20Gi"))
    check_study_plan(study, parse_quantity("8Ti"))  # an external store with room
    check_study_plan(study, None)  # unknown: not checked
    # A spec with a store of its own (endpoint_url) is not judged by the platform store's room.
    exp = validate_document(_paper(storage={"endpoint_url": "https://s3.example.com"}), "t")
    check_plan(exp, parse_quantity("20Gi"))
    with pytest.raises(ValueError, match="spec.storage.checkpoint_uri"):
        check_plan(validate_document(_paper(), "t"), parse_quantity("20Gi"))


def test_submit_checks_the_paper_study() -> None:
    load_study_for_cluster(PAPER_STUDY)  # fits: no error


def test_unknown_model_is_a_note_not_a_refusal() -> None:
    exp = validate_document(_paper(model={"name": "someone/private-model"}), "t")
    plan = plan_experiment(exp)
    assert plan.misfits == [] and plan.phases == []
    assert any("architecture unknown" in n for n in plan.notes)


@pytest.mark.parametrize(("raw", "expected"), [("", None), ("20Gi", 20 * 2**30), ("4T", 4e12)])
def test_store_capacity_from_env(raw: str, expected: float | None) -> None:
    assert store_capacity_from_env({"SARL_STORE_CAPACITY": raw}) == expected


def test_store_capacity_env_that_is_not_a_quantity_names_the_variable() -> None:
    with pytest.raises(ValueError, match="SARL_STORE_CAPACITY"):
        store_capacity_from_env({"SARL_STORE_CAPACITY": "lots"})


def test_trl_counts_its_colocated_vllm_in_the_update() -> None:
    """TRL's colocated vLLM stays awake through the update (no sleep mode), so its share is
    part of the training phase; without vLLM (trl_vllm false) it is not."""
    colocated = plan_experiment(validate_document(_paper(resources={"backend": "trl"}), "t"))
    (training,) = colocated.phases
    assert any(t.name.startswith("vLLM colocated") for t in training.terms)
    (misfit,) = colocated.misfits
    assert (misfit.field, misfit.fix) == (
        "spec.algorithm.micro_batch_size_per_gpu",
        "set it to at most 1",
    )
    plain = plan_experiment(
        validate_document(_paper(resources={"backend": "trl", "trl_vllm": False}), "t")
    )
    assert plain.misfits == [] and plain.tokens_per_pass == 2 * (1024 + 8192)


def test_a_gpu_too_small_for_the_state_alone_suggests_no_negative_share() -> None:
    exp = validate_document(_paper(resources={"gpu_memory": "10Gi"}), "t")
    fixes = [(c.field, c.fix) for c in plan_experiment(exp).misfits]
    field, fix = fixes[0]
    assert field == "spec.resources.nodes"
    assert fix.startswith("even one response per pass does not fit")
    share = [f for name, f in fixes if name == "spec.algorithm.rollout_gpu_memory_utilization"]
    assert "leaves vLLM no room" in share[0] and not any("-0." in f for f in share)


@pytest.mark.parametrize("memory", ["0", "0Gi", "100Mi", "1" * 25 + "Gi"])
def test_gpu_memory_must_be_a_gpu(memory: str) -> None:
    """Hostile or mistaken sizes are refused at validation, naming the field (a 400-digit
    quantity once overflowed the plan's arithmetic)."""
    with pytest.raises(SpecError, match=r"spec\.resources\.gpu_memory"):
        validate_document(_paper(resources={"gpu_memory": memory}), "t")
