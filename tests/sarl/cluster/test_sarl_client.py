"""``sarl.Client``: ``Client()`` is the cluster client, ``Client.local()`` the local one, and
``import sarl`` / ``sarl.Client`` never import ``kubernetes`` (the ``cluster`` extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sarl
from sarl.client import LocalClient
from sarl.cluster import ClusterClient
from tests.sarl.cluster.conftest import experiment_doc
from tests.support.kube_server import EXPERIMENTS, KubeServer


def test_client_submits_to_the_cluster(kubeconfig: Path, server: KubeServer, ns: str) -> None:
    client = sarl.Client(kubeconfig=kubeconfig)
    assert isinstance(client, ClusterClient) and client.namespace == ns
    assert client.submit(experiment_doc("via-sarl")).name == "via-sarl"
    assert "via-sarl" in server.objects(EXPERIMENTS, ns)


def test_local_stays_a_static_constructor(tmp_path: Path) -> None:
    local = sarl.Client.local(workdir=tmp_path, progress=False)
    assert isinstance(local, LocalClient) and local.workdir == tmp_path


def test_importing_the_client_does_not_import_kubernetes() -> None:
    code = "import sys, sarl; sarl.Client; import sarl.cluster; print('kubernetes' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"
