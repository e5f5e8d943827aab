"""Shared pytest setup: skip hardware/cluster-bound tests where the hardware/cluster is absent.

``gpu`` tests run only when torch sees a CUDA device; ``e2e`` tests only when KUBECONFIG points
at a cluster. Everything else runs everywhere. ``SARL_CACHE_DIR`` (exported ONNX models, see
``sarl.embedding.onnx_export``) points at a directory of this session, inherited by the services
the tests start, so the suite writes nothing under the user's home and exports each model once.
A directory this file made is removed when the session ends (an ONNX export is ~87 MB; one left
per run filled a CI machine's disk).
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

if "SARL_CACHE_DIR" not in os.environ:
    _session_cache = tempfile.mkdtemp(prefix="sarl-test-cache-")
    os.environ["SARL_CACHE_DIR"] = _session_cache
    # atexit, not pytest_unconfigure: services the tests started may still be shutting down when
    # the hooks run; ignore_errors because a file one of them still writes must not fail the run.
    atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = None
    for item in items:
        # The marker, not item.keywords: keywords also hold folder names (tests/gpu/).
        if item.get_closest_marker("gpu") is not None:
            gpu = _has_gpu() if gpu is None else gpu
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if item.get_closest_marker("e2e") is not None and not os.environ.get("KUBECONFIG"):
            item.add_marker(pytest.mark.skip(reason="needs a cluster (set KUBECONFIG)"))


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto S3 server for the whole session.

    moto's server is a real S3-compatible HTTP server on loopback (signing, multipart, listing,
    error XML), so S3 code is exercised over HTTP exactly as against MinIO or AWS.
    """
    pytest.importorskip("moto")  # the dev extra; the verl environment has no moto
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The real MLflow tracking server (``mlflow server`` subprocess, SQLite backend, proxied
    artifacts), started once per session (~10-15 s)."""
    from tests.support.mlflow_server import running_mlflow_server

    with running_mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as server:
        yield server


@pytest.fixture(autouse=True)
def _spools_in_tmp(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trackers made without a spool folder (a Study's parent run, say) spool under the test's
    own tmp dir (beside ``tmp_path``, which tests may expect empty), not ``./.sarl/spool`` of the
    checkout the suite runs in. Only where the tracker can
    be imported (the verl environment has no MLflow)."""
    if importlib.util.find_spec("mlflow") is None:
        return
    spools = tmp_path_factory.mktemp("spool")
    monkeypatch.setattr("sarl.tracking.tracker.DEFAULT_SPOOL_ROOT", spools)
