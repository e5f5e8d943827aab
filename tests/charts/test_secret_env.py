"""values.schema.json: an ``env`` entry named like a secret (AWS_SECRET_ACCESS_KEY, *_TOKEN, *_KEY,
*_PASSWORD, *_SECRET) takes ``valueFrom.secretKeyRef``, never a plain ``value``, in every env list
of both charts; other names keep plain values."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts.rendering import CHARTS_DIR, INFERENCE, KUBE_VERSION, PLATFORM, render_templates

#: Every env list of the two charts: (chart, path of the list as keys).
ENV_LISTS: list[tuple[str, tuple[str, ...]]] = [
    (PLATFORM, ("mlflow", "env")),
    (PLATFORM, ("operator", "env")),
    (INFERENCE, ("embedding", "vllm", "env")),
    (INFERENCE, ("embedding", "sarlCpu", "env")),
    (INFERENCE, ("judge", "env")),
    (INFERENCE, ("reward", "env")),
]
SECRET_NAMES = [
    "AWS_SECRET_ACCESS_KEY",
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "MLFLOW_TRACKING_PASSWORD",
    "OAUTH_CLIENT_SECRET",
    "TOKEN",
]
SECRET_REF = {"secretKeyRef": {"name": "sarl-credentials", "key": "token"}}


def nested(path: tuple[str, ...], env: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"a": {"b": {"env": env}}}`` for ``path=("a", "b", "env")``."""
    values: dict[str, Any] = {path[-1]: env}
    for key in reversed(path[:-1]):
        values = {key: values}
    return values


def pointer(path: tuple[str, ...], index: int) -> str:
    return "/" + "/".join(path) + f"/{index}"


@pytest.mark.parametrize(("chart", "path"), ENV_LISTS, ids=["/".join(p) for _, p in ENV_LISTS])
@pytest.mark.parametrize("name", SECRET_NAMES)
def test_plain_value_of_a_secret_variable_fails_naming_the_entry(
    chart: str, path: tuple[str, ...], name: str
) -> None:
    import helm_python as helm

    env = [{"name": "LOG_LEVEL", "value": "info"}, {"name": name, "value": "literal"}]
    with pytest.raises(helm.HelmValuesError) as info:
        render_templates(chart, nested(path, env))
    message = str(info.value)
    assert f"at '{pointer(path, 1)}/value'" in message, message
    assert pointer(path, 0) not in message  # LOG_LEVEL's plain value is fine


@pytest.mark.parametrize(("chart", "path"), ENV_LISTS, ids=["/".join(p) for _, p in ENV_LISTS])
def test_secret_variable_needs_a_secret_key_ref(chart: str, path: tuple[str, ...]) -> None:
    import helm_python as helm

    config_map = {"configMapKeyRef": {"name": "c", "key": "k"}}
    for entry, missing in [
        ({"name": "HF_TOKEN"}, "missing property 'valueFrom'"),
        ({"name": "HF_TOKEN", "valueFrom": config_map}, "missing property 'secretKeyRef'"),
    ]:
        with pytest.raises(helm.HelmValuesError) as info:
            render_templates(chart, nested(path, [entry]))
        assert pointer(path, 0) in str(info.value) and missing in str(info.value)


@pytest.mark.parametrize(("chart", "path"), ENV_LISTS, ids=["/".join(p) for _, p in ENV_LISTS])
def test_secret_key_ref_and_plain_non_secret_values_pass(chart: str, path: tuple[str, ...]) -> None:
    import helm_python as helm

    env = [
        {"name": "HF_TOKEN", "valueFrom": SECRET_REF},
        {"name": "AWS_ACCESS_KEY_ID", "value": "not-secret-by-name"},
        {"name": "SARL_TOKEN_BUDGET", "value": "4096"},
        {"name": "OPENAI_API_KEY_ENV", "value": "OPENAI_API_KEY"},
    ]
    values = nested(path, env)
    if path[:2] == ("embedding", "sarlCpu"):  # rendered only for that backend
        values["embedding"]["backend"] = "sarl-cpu"
    rendered = "".join(render_templates(chart, values).values())
    assert "sarl-credentials" in rendered
    report = helm.lint(
        CHARTS_DIR / chart, values, strict=True, namespace="sarl", kube_version=f"v{KUBE_VERSION}.0"
    )
    assert not report["errors"], report["errors"]


def test_lint_reports_a_plain_secret_value() -> None:
    import helm_python as helm

    values = {"operator": {"env": [{"name": "HF_TOKEN", "value": "hf_literal"}]}}
    try:
        report = helm.lint(CHARTS_DIR / PLATFORM, values, strict=True, namespace="sarl")
    except helm.HelmError as e:  # lint may raise instead of reporting
        text = str(e)
    else:
        text = str(report)
    assert "/operator/env/0/value" in text, text
