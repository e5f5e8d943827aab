"""``spec.serving``: the resources and vLLM settings of the models the operator serves — defaults
matching the sarl-inference chart's for the same models, and one-line errors naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sarl.spec import SpecError, load_experiment
from sarl.spec.cluster_fields import EmbeddingServingSpec, JudgeServingSpec, ServingSpec

CHART_VALUES = Path(__file__).resolve().parents[3] / "charts" / "sarl-inference" / "values.yaml"


def _exp(serving: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "spec": {"serving": serving}}


def test_defaults_are_the_charts_limits() -> None:
    """The operator's served models get what the chart gives the same models: its limits as
    request and limit, its context lengths, one GPU."""
    values = yaml.safe_load(CHART_VALUES.read_text(encoding="utf-8"))
    chart = {"embedding": values["embedding"]["vllm"], "judge": values["judge"]}
    served = {"embedding": EmbeddingServingSpec(), "judge": JudgeServingSpec()}
    for name, spec in served.items():
        source = chart[name]
        limits = source["resources"]["limits"]
        assert (spec.cpu, spec.memory) == (limits["cpu"], limits["memory"]), name
        assert spec.max_model_len == source["maxModelLen"], name
        assert spec.gpus == source["gpus"] == 1, name
        assert spec.node_selector == {} and spec.tolerations == [] and spec.extra_args == []


def test_each_model_keeps_its_own_defaults() -> None:
    """Setting one field of the judge leaves the judge's defaults, not the embedder's."""
    exp = load_experiment(_exp({"judge": {"gpus": 2}}))
    assert exp.spec.serving.judge.gpus == 2
    assert (exp.spec.serving.judge.cpu, exp.spec.serving.judge.memory) == ("8", "32Gi")
    assert exp.spec.serving.embedding == EmbeddingServingSpec()


def test_absent_section_is_the_default() -> None:
    assert load_experiment(_exp({})).spec.serving == ServingSpec()
    assert load_experiment({"metadata": {"name": "x"}}).spec.serving == ServingSpec()


@pytest.mark.parametrize(
    "args",
    [["--gpu-memory-utilization=0.85"], ["--dtype", "bfloat16"], ["--enforce-eager"], []],
)
def test_extra_args_accepted(args: list[str]) -> None:
    assert (
        load_experiment(_exp({"judge": {"extra_args": args}})).spec.serving.judge.extra_args == args
    )


@pytest.mark.parametrize(
    "arg",
    [
        "--model_name=x",
        "--model-id=y",
        "--backend=hf",
        "--runner=generate",
        "--max_model_len=4096",
        "--max-model-len",
        "--max_length=10",
        "--tensor_parallel_size=2",
        "-tp",
    ],
)
def test_extra_args_cannot_repeat_operator_flags(arg: str) -> None:
    """A repeated flag would silently win over (or lose to) the operator's: refused, naming it."""
    with pytest.raises(
        SpecError, match=r"spec\.serving\.embedding\.extra_args=.*the operator sets"
    ):
        load_experiment(_exp({"embedding": {"extra_args": [arg]}}))


@pytest.mark.parametrize(
    ("serving", "message"),
    [
        ({"embedding": {"memory": "16GB"}}, "spec.serving.embedding.memory='16GB': must be a"),
        ({"judge": {"cpu": "four"}}, "spec.serving.judge.cpu='four': must be a Kubernetes"),
        ({"judge": {"gpus": 0}}, "spec.serving.judge.gpus=0: Input should be greater"),
        ({"embedding": {"max_model_len": 0}}, "spec.serving.embedding.max_model_len=0"),
        ({"judge": {"replicas": 2}}, "spec.serving.judge.replicas: unknown field"),
    ],
)
def test_invalid_serving_names_the_field(serving: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as err:
        load_experiment(_exp(serving))
    assert message in str(err.value)


@pytest.mark.parametrize("quantity", ["4", "500m", "0.5", "16Gi", "64G", "1.5Ti"])
def test_quantities_accepted(quantity: str) -> None:
    exp = load_experiment(_exp({"embedding": {"cpu": quantity, "memory": quantity}}))
    assert exp.spec.serving.embedding.memory == quantity
