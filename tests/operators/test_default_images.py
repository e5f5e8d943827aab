"""The operator's trainer images without the chart's settings: pinned to this release, never
``latest`` (issue 36: images by tag with a ``:latest`` fallback)."""

from __future__ import annotations

import sarl
from sarl_operator.reconcile import DEFAULT_IMAGES, Settings


def test_no_moving_tag_when_the_environment_names_no_image() -> None:
    settings = Settings.from_env({})
    for image in (settings.verl_image, settings.trl_image, *DEFAULT_IMAGES.values()):
        assert not image.endswith(":latest")
        assert image.endswith(f":{sarl.__version__}")


def test_the_chart_pins_by_digest_when_given() -> None:
    """The chart's images (what the operator runs in practice) by digest once the release
    workflow set one: the tag is then ignored."""
    from tests.charts.rendering import PLATFORM, render_templates

    digest = "sha256:" + "a" * 64
    values = {"trainer": {"image": {"digest": digest}, "trlImage": {"digest": digest}}}
    text = render_templates(PLATFORM, values)["sarl-platform/templates/operator-deployment.yaml"]
    assert f"ghcr.io/sarl-dev/sarl-verl@{digest}" in text
    assert f"ghcr.io/sarl-dev/sarl-trl@{digest}" in text
