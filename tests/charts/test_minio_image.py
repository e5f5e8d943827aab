"""The bundled S3 server (``objectStore.provider: minio``) uses an image that can still be pulled.

MinIO's community images are gone: the ``minio/minio`` repository was archived on 2026-04-25 and
its images were then withdrawn from Docker Hub and quay.io (pgsty/silo
``docs/upgrade/single-node-from-archived-minio.md``; zilliztech/milvus-helm issue 315). The
chart runs Silo (``pgsty/silo``, the maintained MinIO fork), whose image is built by
``Dockerfile.goreleaser`` of pgsty/silo (main, read at 31ba01c5): the server at
``/usr/bin/silo`` (no ``minio`` executable, so the command names ``silo``), ``mc`` linked to the
bundled ``mcli``, entrypoint ``/usr/bin/docker-entrypoint.sh`` on a UBI micro base (a shell),
and ``.github/workflows/docker-release.yml`` publishes it multi-arch as
``pgsty/silo:<RELEASE tag>``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts.rendering import PLATFORM, Case, objects, pod_specs

#: Registry paths MinIO's withdrawn community images were served from.
WITHDRAWN = ("minio/", "docker.io/minio/", "quay.io/minio/")


def _pods(case: Case) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for obj in objects(case):
        found += [(obj["metadata"]["name"], pod) for pod in pod_specs(obj)]
    return found


def _by_component(case: Case, component: str) -> dict[str, Any]:
    (found,) = (
        o
        for o in objects(case)
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == component
        and o["kind"] in ("Deployment", "Job")
    )
    return dict(found)


@pytest.mark.parametrize("case", [Case(PLATFORM)], ids=lambda c: c.id)
def test_no_withdrawn_minio_image(case: Case) -> None:
    for name, pod in _pods(case):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert not container["image"].startswith(WITHDRAWN), (
                f"{name}: {container['image']} was withdrawn with MinIO's community edition"
            )


def test_silo_server_and_bucket_job() -> None:
    case = Case(PLATFORM)
    (server,) = _by_component(case, "minio")["spec"]["template"]["spec"]["containers"]
    repository, tag = server["image"].rsplit(":", 1)
    assert repository == "docker.io/pgsty/silo" and tag.startswith("RELEASE.")
    assert server["command"] == ["silo", "server", "/data"]
    assert server["readinessProbe"]["httpGet"]["path"] == "/minio/health/ready"
    (mc,) = _by_component(case, "minio-setup")["spec"]["template"]["spec"]["containers"]
    assert mc["image"] == server["image"], "Silo's image bundles mc: one image to pull"
    assert mc["command"] == ["/bin/sh", "-ec"] and "mc --config-dir" in mc["args"][0]


def test_a_mirrored_minio_image_runs_minio() -> None:
    from tests.charts.rendering import render_templates

    values = {
        "objectStore": {
            "minio": {
                "image": {
                    "repository": "registry.example.com/minio/minio",
                    "tag": "RELEASE.2025-09-07T16-13-09Z",
                    "pullPolicy": "IfNotPresent",
                },
                "executable": "minio",
            }
        }
    }
    text = render_templates(PLATFORM, values)["sarl-platform/templates/minio-deployment.yaml"]
    assert 'command: ["minio", "server", "/data"]' in text
    assert "image: registry.example.com/minio/minio:RELEASE.2025-09-07T16-13-09Z" in text
