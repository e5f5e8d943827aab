"""The "Images" step of docs/cluster/install.md (the README's until issue 41), followed as
written: `make images`/`make push-images` build every image the charts run, under the names the
charts expect, and the page's `helm install --set`
flags, rendered with the real Helm engine, put those images (and their registry in the allow-list)
into the operator's Deployment.

No Docker engine runs here: the Makefile is read with `make -n` (what it would run), not built.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts.rendering import render_templates

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "registry.example.com/team"
TAG = "0.1.0"


def _images_block() -> str:
    text = (ROOT / "docs" / "cluster" / "install.md").read_text(encoding="utf-8")
    start = text.index("## Images")
    blocks = re.findall(r"```bash\n(.*?)```", text[start:], re.S)
    builds = [block for block in blocks if "make push-images" in block]
    assert builds, "docs/cluster/install.md's Images step has no bash block with make push-images"
    return str(builds[0])


def _set_values(block: str) -> dict[str, Any]:
    """The ``--set`` flags of the block as a values tree (the forms Helm's strvals parser takes
    that the README uses: ``a.b=v`` pairs separated by commas, and ``a={x,y}`` lists)."""
    values: dict[str, Any] = {}
    for flag in re.findall(r"--set\s+('[^']*'|\S+)", block):
        flag = flag.strip("'")
        pairs = [flag] if "={" in flag else flag.split(",")
        for pair in pairs:
            key, _, raw = pair.partition("=")
            value: Any = raw[1:-1].split(",") if raw.startswith("{") else raw
            node = values
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
    return values


def test_make_images_builds_every_dockerfile_under_the_chart_names() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # Not a sub-make of the caller's `make test`: its MAKEFLAGS/MAKELEVEL would add "Entering
    # directory" lines to what -n prints.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "images", f"REGISTRY={REGISTRY}", f"TAG={TAG}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # `make -n` prints the shell loop; expand it as the shell would.
    builds = subprocess.run(
        ["bash", "-c", out.replace("docker build", "echo BUILD")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    built = dict(re.findall(r"^BUILD -f (\S+) -t (\S+) \.$", builds, re.M))  # Dockerfile -> image
    dockerfiles = {
        str(p.relative_to(ROOT))
        for pattern in ("services/*/Dockerfile", "operators/Dockerfile", "jobs/docker/*.Dockerfile")
        for p in ROOT.glob(pattern)
    }
    assert set(built) == dockerfiles
    names = {image.split(":")[0].rsplit("/", 1)[-1] for image in built.values()}
    assert names == {f"sarl-{n}" for n in ("embedding", "reward", "operator", "verl", "trl")}
    assert all(
        image.startswith(f"{REGISTRY}/") and image.endswith(f":{TAG}") for image in built.values()
    )


def test_push_images_without_a_registry_says_so() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    run = subprocess.run(
        ["make", "--no-print-directory", "push-images"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode != 0
    assert "set REGISTRY=" in run.stdout + run.stderr


def test_readme_helm_flags_point_the_platform_at_the_pushed_images() -> None:
    block = _images_block()
    assert f"make push-images REGISTRY={REGISTRY} TAG={TAG}" in block
    values = _set_values(block)
    rendered = render_templates("sarl-platform", values)
    (deployment,) = [
        doc
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc and doc.get("kind") == "Deployment" and doc["metadata"]["name"].endswith("operator")
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == f"{REGISTRY}/sarl-operator:{TAG}"
    assert env["SARL_TRAINER_IMAGE"] == f"{REGISTRY}/sarl-verl:{TAG}"
    assert env["SARL_TRL_TRAINER_IMAGE"] == f"{REGISTRY}/sarl-trl:{TAG}"
    assert f"{REGISTRY}/" in (env.get("SARL_ALLOWED_IMAGE_REGISTRIES") or "")
