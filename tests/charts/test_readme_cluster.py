"""The README's cluster section as issue 35 asks (items 3, 5, 10 and storage): it starts with
the images (where they come from, how to mirror them, the NVIDIA driver), claims Guaranteed QoS
only with the Training Operator's init container named, and its commands and chart values match
what the chart renders (the ConfigMap the Training Operator is to mount, the store capacity)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.charts.rendering import PLATFORM, render_templates

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Running on a cluster\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_the_section_starts_with_the_images() -> None:
    first = _paragraphs(_section())[1]
    assert first.startswith("**Images.**")
    assert ".github/workflows/release.yml" in first and "ghcr.io" in first
    images = _section()[: _section().index("**Requirements.**")]
    assert "driver >= 580" in images  # verl's CUDA 13 base
    assert "driver >= 570" in images  # TRL's CUDA 12.8 base
    assert re.search(r"crane copy \S+@sha256:", images)
    assert "skopeo copy --all" in images
    assert "SARL_ALLOWED_IMAGE_REGISTRIES" in images and "allowedImageRegistries" in images


def test_guaranteed_is_never_claimed_without_the_init_container() -> None:
    """Every topic of the section (a bold-titled block) that says Guaranteed also says which
    Workers are Burstable, and why."""
    topics = re.split(r"\n\n(?=\*\*[A-Z])", _section())
    claims = [topic for topic in topics if "Guaranteed" in topic]
    assert claims
    for topic in claims:
        assert "init-pytorch" in topic and "Burstable" in topic, topic[:200]
    assert "(Guaranteed QoS, the last pods evicted under pressure)" not in _section()


def test_the_readme_mounts_the_configmap_the_chart_renders() -> None:
    section = _section()
    (patch,) = re.findall(
        r"kubectl -n kubeflow patch deployment training-operator .*? -p '(.*?)'", section, re.S
    )
    spec = json.loads(patch)["spec"]["template"]["spec"]
    (volume,) = spec["volumes"]
    (container,) = spec["containers"]
    (mount,) = container["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["mountPath"] == "/etc/config"
    values = {"trainingOperator": {"guaranteedInitContainer": {"enabled": True}}}
    text = render_templates(PLATFORM, values)[
        f"{PLATFORM}/templates/training-operator-init-container.yaml"
    ]
    config_map = yaml.safe_load(text)
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_map["metadata"]["namespace"] == "kubeflow"
    # The Training Operator's default template file (v1.9.0 pkg/config/config.go).
    assert (
        f"{mount['mountPath']}/{next(iter(config_map['data']))}" == "/etc/config/initContainer.yaml"
    )


def test_the_store_is_described_as_a_trial_store_with_its_capacity() -> None:
    section = _section()
    assert "*The bundled S3 server is a trial store*" in section
    assert "about 4 TB" in section and "SARL_STORE_CAPACITY" in section
    flags = re.search(r"# the paper Study: --set (\S+)", section)
    assert flags
    values: dict[str, object] = {}
    for pair in flags.group(1).split(","):
        key, _, value = pair.partition("=")
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[leaf] = value  # type: ignore[index]
    text = render_templates(PLATFORM, values)[f"{PLATFORM}/templates/operator-deployment.yaml"]
    assert 'name: SARL_STORE_CAPACITY\n              value: "5Ti"' in text
