"""The platform chart's MLflow image contains what its server arguments need: boto3 for the S3
artifact destination and the database drivers of a ``backendStore`` Secret's URI.

Contract with MLflow's images, read from ``mlflow/mlflow``:

* ``docker/Dockerfile`` builds the plain ``ghcr.io/mlflow/mlflow:vX.Y.Z`` image with
  ``pip install mlflow==$VERSION`` only, and ``docker/Dockerfile.full`` the ``vX.Y.Z-full`` one
  with ``pip install mlflow[extras,db,gateway,genai]==$VERSION`` (``[extras,azure,db,gateway,
  genai,auth]`` on later main); ``docker/README.md``: "The ``-full`` image variant is only
  available starting from MLflow v3.9.0". Read from the stored main-branch snapshots (commits
  6f9f6878 and 092ba8b1; the tag itself could not be fetched here): both name ``extras`` and
  ``db``.
* What those extras install is read from the wheel of the release the chart pins, MLflow
  3.17.2 (``mlflow-3.17.2.dist-info/METADATA``, the ``.venv`` of this repository): ``boto3`` only
  under ``extra == "extras"`` (and gateway/genai/databricks), ``psycopg2-binary`` and ``PyMySQL``
  under ``extra == "db"``; the core requirements never reach boto3.
"""

from __future__ import annotations

import re
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from tests.charts.rendering import PLATFORM, Case, objects_of_kind

#: The extras docker/Dockerfile.full installs that the chart relies on.
FULL_IMAGE_EXTRAS = ("extras", "db")


def _mlflow_image() -> str:
    (deployment,) = (
        d
        for d in objects_of_kind(Case(PLATFORM), "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "mlflow"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def _requirements(dist: str, extra: str | None) -> set[str]:
    """Names of ``dist``'s requirements active with ``extra`` (None: the core set only)."""
    names = set()
    for line in metadata.requires(dist) or []:
        req = Requirement(line)
        env = {"extra": extra or ""}
        if req.marker is None or req.marker.evaluate(env):
            names.add(re.sub(r"[-_.]+", "-", req.name).lower())
    return names


def _core_closure(dist: str) -> set[str]:
    """Every installed distribution ``dist`` pulls in without extras (what the plain image has)."""
    seen: set[str] = set()
    todo = [dist]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(_requirements(name, None) - seen)
        except metadata.PackageNotFoundError:
            continue  # a platform-conditional requirement not installed here
    return seen


def test_chart_runs_the_full_image_of_the_tested_release() -> None:
    image = _mlflow_image()
    repository, tag = image.rsplit(":", 1)
    assert repository == "ghcr.io/mlflow/mlflow"
    assert tag.endswith("-full"), (
        f"{image}: the plain MLflow image has no boto3, so --artifacts-destination s3://... fails"
        " on every upload; use the -full variant"
    )
    version = tag.removeprefix("v").removesuffix("-full")
    assert version == metadata.version("mlflow"), (
        f"the chart pins MLflow {version}, the tests run {metadata.version('mlflow')}"
    )


def test_plain_mlflow_lacks_boto3_and_the_full_extras_have_it() -> None:
    pytest.importorskip("mlflow")
    assert "boto3" not in _core_closure("mlflow"), "MLflow's core now needs boto3: recheck"
    assert "boto3" in _requirements("mlflow", "extras")
    db = _requirements("mlflow", "db")
    assert {"psycopg2-binary", "pymysql"} <= db, db
    assert set(FULL_IMAGE_EXTRAS) <= set(
        metadata.metadata("mlflow").get_all("Provides-Extra") or []
    )
