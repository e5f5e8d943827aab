"""The release workflow (.github/workflows/release.yml) builds exactly the images `make images`
builds (same Dockerfiles under the same sarl-<name> names), for linux/amd64, pushes them with
an SBOM, records each digest, and hands the digests to the script that writes them into the
charts; every action is pinned by commit. No GitHub runner runs here: the workflow is read
(and linted by actionlint in `make lint-workflows`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def _workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return loaded


def _make_images() -> dict[str, str]:
    """Image name -> Dockerfile, from what `make -n images` would run."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "images", "REGISTRY=r.example/x", "TAG=t"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    builds = subprocess.run(
        ["bash", "-c", out.replace("docker build", "echo BUILD")],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = re.findall(r"^BUILD -f (\S+) -t r\.example/x/sarl-([a-z]+):t \.$", builds, re.M)
    return {name: dockerfile for dockerfile, name in found}


def _build_step() -> dict[str, Any]:
    steps = _workflow()["jobs"]["images"]["steps"]
    (step,) = [s for s in steps if str(s.get("uses", "")).startswith("docker/build-push-action@")]
    return dict(step)


def test_the_workflow_builds_what_make_images_builds() -> None:
    matrix = _workflow()["jobs"]["images"]["strategy"]["matrix"]["include"]
    workflow = {entry["name"]: entry["dockerfile"] for entry in matrix}
    assert len(workflow) == len(matrix)
    made = _make_images()
    assert len(made) == 5
    assert workflow == made
    step = _build_step()["with"]
    assert step["file"] == "${{ matrix.dockerfile }}"
    assert step["context"] == "."
    assert "/sarl-${{ matrix.name }}" in _workflow()["jobs"]["images"]["steps"][1]["run"]


def test_the_digest_script_writes_every_image_the_workflow_builds() -> None:
    import importlib.util
    import sys

    path = ROOT / ".github" / "scripts" / "set_image_digests.py"
    spec = importlib.util.spec_from_file_location("set_image_digests", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert set(module.TARGETS) == set(_make_images())
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "python3 .github/scripts/set_image_digests.py" in text


def test_amd64_push_sbom_and_digest() -> None:
    step = _build_step()
    assert step["with"]["platforms"] == "linux/amd64"
    assert step["with"]["push"] is True
    assert step["with"]["sbom"] is True
    assert step["id"] == "build"
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "steps.build.outputs.digest" in text
    steps = _workflow()["jobs"]["images"]["steps"]
    assert any(str(s.get("uses", "")).startswith("anchore/sbom-action@") for s in steps)


def test_triggered_by_version_tags_with_least_privilege() -> None:
    workflow = _workflow()
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    assert on == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    assert jobs["images"]["permissions"] == {"contents": "read", "packages": "write"}
    assert jobs["release"]["permissions"] == {"contents": "write"}
    assert jobs["chart-digests"]["permissions"] == {
        "contents": "write",
        "pull-requests": "write",
    }


def test_every_action_is_pinned_by_commit() -> None:
    uses = [
        str(step["uses"])
        for job in _workflow()["jobs"].values()
        for step in job["steps"]
        if "uses" in step
    ]
    assert uses
    unpinned = [u for u in uses if not re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u)]
    assert unpinned == []
    # The tag each commit stands for is written beside it.
    text = WORKFLOW.read_text(encoding="utf-8")
    assert all(re.search(re.escape(u) + r" # v\d+\.\d+\.\d+\n", text) for u in uses)
