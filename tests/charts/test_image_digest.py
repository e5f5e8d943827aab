"""Images by digest: an image value with ``digest`` set renders as ``<repository>@<digest>``
(the tag ignored) wherever the charts use it, so the digests the release workflow writes into
values.yaml pin exactly what it pushed; a malformed digest is refused naming the key."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.charts.rendering import INFERENCE, PLATFORM, render_templates

DIGEST = "sha256:" + "ab" * 32


def _docs(chart: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        doc
        for path, text in render_templates(chart, values).items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def test_platform_images_by_digest() -> None:
    pinned = {"digest": DIGEST, "tag": "9.9.9"}
    values = {
        "operator": {"image": pinned},
        "trainer": {"image": pinned, "trlImage": pinned},
    }
    (deployment,) = [
        d
        for d in _docs(PLATFORM, values)
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == f"ghcr.io/sarl-dev/sarl-operator@{DIGEST}"
    assert env["SARL_TRAINER_IMAGE"] == f"ghcr.io/sarl-dev/sarl-verl@{DIGEST}"
    assert env["SARL_TRL_TRAINER_IMAGE"] == f"ghcr.io/sarl-dev/sarl-trl@{DIGEST}"


def test_platform_images_by_tag_without_digest() -> None:
    (deployment,) = [
        d
        for d in _docs(PLATFORM, {})
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator")
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/sarl-dev/sarl-operator:0.1.0"


def test_inference_images_by_digest() -> None:
    values = {
        "embedding": {"backend": "sarl-cpu", "sarlCpu": {"image": {"digest": DIGEST}}},
        "reward": {"image": {"digest": DIGEST}},
    }
    images = {
        c["image"]
        for d in _docs(INFERENCE, values)
        for c in _containers(d)
        if "sarl-dev" in c.get("image", "")
    }
    assert images == {
        f"ghcr.io/sarl-dev/sarl-embedding@{DIGEST}",
        f"ghcr.io/sarl-dev/sarl-reward@{DIGEST}",
    }


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "InferenceService":
        return [spec["predictor"], *(spec["predictor"].get("containers") or [])]
    pod = (spec.get("template") or {}).get("spec") or {}
    return list(pod.get("containers") or [])


@pytest.mark.parametrize("bad", ["abc", "sha256:XYZ", "sha256:" + "a" * 63, "md5:" + "a" * 64])
def test_a_malformed_digest_is_refused(bad: str) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match="digest"):
        render_templates(PLATFORM, {"operator": {"image": {"digest": bad}}})
