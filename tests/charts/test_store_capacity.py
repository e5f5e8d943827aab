"""The platform chart tells the operator what its object store can hold (issue 35, storage):
``SARL_STORE_CAPACITY`` on the operator is the bundled store's volume size with
``objectStore.provider: minio``, else ``objectStore.external.capacity`` (empty: unknown), and
values.yaml describes the bundled store as the trial store it is."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.charts.rendering import CHARTS_DIR, PLATFORM, render_templates

EXTERNAL = {"provider": "external", "external": {"endpoint": "https://s3.example.com"}}


def _operator_env(values: dict[str, Any]) -> dict[str, Any]:
    text = render_templates(PLATFORM, values)[f"{PLATFORM}/templates/operator-deployment.yaml"]
    (deployment,) = [d for d in yaml.safe_load_all(text) if d]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize(
    ("object_store", "expected"),
    [
        ({}, "20Gi"),
        ({"minio": {"persistence": {"size": "500Gi"}}}, "500Gi"),
        (EXTERNAL, ""),
        ({**EXTERNAL, "external": {**EXTERNAL["external"], "capacity": "5Ti"}}, "5Ti"),
        # The external capacity means nothing while the bundled store is the store.
        ({"external": {"capacity": "5Ti"}}, "20Gi"),
    ],
)
def test_operator_gets_the_store_capacity(object_store: dict[str, Any], expected: str) -> None:
    env = _operator_env({"objectStore": object_store} if object_store else {})
    assert env["SARL_STORE_CAPACITY"] == expected


@pytest.mark.parametrize("bad", ["5 TB", "lots", "-1Ti"])
def test_external_capacity_must_be_a_quantity(bad: str) -> None:
    import helm_python as helm

    values = {"objectStore": {**EXTERNAL, "external": {"capacity": bad}}}
    with pytest.raises(helm.HelmError, match="capacity"):
        render_templates(PLATFORM, values)


def test_values_call_the_bundled_store_a_trial_store() -> None:
    text = (CHARTS_DIR / PLATFORM / "values.yaml").read_text(encoding="utf-8")
    size_doc = text[: text.index("      size: 20Gi")].rsplit("# -- ", 1)[1]
    assert "TRIAL store" in size_doc and "4 TB" in size_doc and "external" in size_doc
    assert "SARL_STORE_CAPACITY" in size_doc
