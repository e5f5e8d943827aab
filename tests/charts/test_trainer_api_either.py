"""The platform chart installs on a cluster with either training API (issue 35, item 5): its
ClusterTrainingRuntime is rendered only where the cluster serves that kind, as Helm's
``.Capabilities.APIVersions`` reports it (``helm template --api-versions``, the real Helm engine),
unless ``trainer.v2.runtime.enabled`` forces it on or off.

Where the runtime is not rendered, Experiments still run: the operator picks PyTorchJob by
discovery (``sarl_operator.experiment_handlers.choose_job_kind``); the chart names the kind the
operator looks for (``sarl_operator.trainjob``)."""

from __future__ import annotations

from typing import Any

import pytest

from sarl_operator import trainjob
from tests.charts.rendering import API_SETS, PLATFORM, TRAINER_V2_RUNTIME, render_templates

RUNTIME_TEMPLATE = f"{PLATFORM}/templates/trainingruntime.yaml"


def _runtime_rendered(values: dict[str, Any] | None, apis: str) -> bool:
    rendered = render_templates(PLATFORM, values, API_SETS[apis] if apis else ())
    return bool(rendered.get(RUNTIME_TEMPLATE, "").strip())


@pytest.mark.parametrize(
    ("enabled", "apis", "expected"),
    [
        (None, "", False),  # plain `helm template`: nothing known to be served
        (None, "training-operator", False),  # Training Operator v1 only: no CRD to create into
        (None, "trainer-v2", True),
        ("auto", "trainer-v2", True),
        (True, "", True),  # forced on: GitOps renders without cluster access
        (True, "training-operator", True),
        (False, "trainer-v2", False),
    ],
)
def test_runtime_follows_the_clusters_apis(enabled: Any, apis: str, expected: bool) -> None:
    values = None if enabled is None else {"trainer": {"v2": {"runtime": {"enabled": enabled}}}}
    assert _runtime_rendered(values, apis) is expected


def test_the_default_is_auto() -> None:
    import helm_python as helm

    from tests.charts.rendering import CHARTS_DIR

    with helm.Chart.load(CHARTS_DIR / PLATFORM) as chart:
        assert chart.values["trainer"]["v2"]["runtime"]["enabled"] == "auto"


@pytest.mark.parametrize("bad", ["yes", "on", 1])
def test_enabled_takes_auto_true_or_false(bad: Any) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="enabled"):
        render_templates(PLATFORM, {"trainer": {"v2": {"runtime": {"enabled": bad}}}})


def test_the_capability_is_the_kind_the_operator_creates() -> None:
    """The API the chart asks about is the one the operator gets the runtime from."""
    assert f"{trainjob.API_VERSION}/{trainjob.RUNTIME_KIND}" == TRAINER_V2_RUNTIME
    rendered = render_templates(PLATFORM, None, API_SETS["trainer-v2"])
    assert f"name: {trainjob.RUNTIME_NAME}\n" in rendered[RUNTIME_TEMPLATE]
