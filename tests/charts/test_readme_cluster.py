"""The cluster pages as issue 35 asks (items 3, 5, 10 and storage; moved out of the README into
docs/ by issue 41): the install page starts with the images (where they come from, how to mirror
them, the NVIDIA driver), no page claims Guaranteed QoS without the Training Operator's init
container named, and their commands and chart values match what the chart renders (the ConfigMap
the Training Operator is to mount, the store capacity)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.charts.rendering import PLATFORM, render_templates

ROOT = Path(__file__).resolve().parents[2]


#: The page that installs the platform: images, requirements, the chart and its store.
INSTALL = ROOT / "docs" / "cluster" / "install.md"
#: The page on what the operator creates, with pod resources and QoS.
RUNS_WHERE = ROOT / "docs" / "concepts" / "cluster.md"


def _section() -> str:
    return INSTALL.read_text(encoding="utf-8")


def _pages() -> list[Path]:
    """Every page a user reads: the README and the hand-written docs (not generated ones)."""
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.parts]
    return [ROOT / "README.md", *sorted(docs)]


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_the_section_starts_with_the_images() -> None:
    paragraphs = _paragraphs(_section())
    images_at = paragraphs.index("## Images")
    first = paragraphs[images_at + 1]
    assert images_at <= 2  # the title, one line saying what the page holds, then the images
    assert ".github/workflows/release.yml" in first and "ghcr.io" in first
    images = _section()[: _section().index("## Requirements")]
    assert "driver >= 580" in images  # verl's CUDA 13 base
    assert "driver >= 570" in images  # TRL's CUDA 12.8 base
    assert re.search(r"crane copy \S+@sha256:", images)
    assert "skopeo copy --all" in images
    assert "SARL_ALLOWED_IMAGE_REGISTRIES" in images and "allowedImageRegistries" in images


def test_guaranteed_is_never_claimed_without_the_init_container() -> None:
    """Every topic of every page (a section under a heading, or a bold-titled block) that says
    Guaranteed also says which Workers are Burstable, and why."""
    claims = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        topics = re.split(r"\n\n(?=\*\*[A-Z]|#+ )", text)
        claims += [(page, topic) for topic in topics if "Guaranteed" in topic]
        assert "(Guaranteed QoS, the last pods evicted under pressure)" not in text
    assert any(page == RUNS_WHERE for page, _ in claims)
    for page, topic in claims:
        assert "init-pytorch" in topic and "Burstable" in topic, (page.name, topic[:200])


def test_the_docs_mount_the_configmap_the_chart_renders() -> None:
    section = RUNS_WHERE.read_text(encoding="utf-8")
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
