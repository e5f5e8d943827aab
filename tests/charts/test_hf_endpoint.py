"""The platform chart's Hub mirror (``trainer.hfEndpoint``) reaches the operator as
``SARL_HF_ENDPOINT``, which it sets as ``HF_ENDPOINT`` in pods whose spec names none
(sarl_operator.model_sources); a value that is not an http(s) URL is refused by the schema."""

from __future__ import annotations

import pytest

from tests.charts.rendering import PLATFORM, render_templates
from tests.charts.test_store_capacity import _operator_env


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, ""),
        (
            {"trainer": {"hfEndpoint": "https://hf-mirror.example.com"}},
            "https://hf-mirror.example.com",
        ),
    ],
)
def test_operator_gets_the_mirror(values: dict[str, object], expected: str) -> None:
    assert _operator_env(values)["SARL_HF_ENDPOINT"] == expected


@pytest.mark.parametrize("bad", ["hf-mirror.example.com", "ftp://mirror", "https://a b"])
def test_a_mirror_that_is_not_a_url_is_refused(bad: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="hfEndpoint"):
        render_templates(PLATFORM, {"trainer": {"hfEndpoint": bad}})
