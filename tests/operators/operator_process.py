"""The operator as a subprocess for the full-operator tests (tests/operators/test_operator.py,
test_study_operator.py, and through them test_rbac.py, test_trainer_v2_operator.py and
tests/examples): the :class:`Operator` process, its environment against an in-memory API server
(:mod:`tests.support.kube_server`) and MLflow, a dynamic client for the tests' own requests, and
polling. The test modules keep their fixtures (each declares its own resources and namespace)
and call these."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import config, dynamic

from tests.support.kube_server import KubeServer

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 180.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` on timeout (180 s:
    a loaded 2-core machine runs the operator, kmock and MLflow at once, and 60 s was seen to
    run out there with the operator still working; a passing wait returns at once)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class Operator:
    """The operator subprocess (its log in ``log_path``), restartable."""

    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "kopf", "run", "-A", "--standalone"]
        command += ["-m", "sarl_operator.handlers"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)  # its own session: only this operator
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@contextlib.contextmanager
def running_operator(
    server: KubeServer, namespace: str, tmp: Path, env: dict[str, str]
) -> Iterator[Operator]:
    """The operator started with ``env`` over the process's own, its kubeconfig pointing at
    ``server`` (``namespace`` as the context's), its log in ``tmp``; stopped on exit."""
    kubeconfig = str(server.kubeconfig(tmp / "kubeconfig", namespace))
    op = Operator(
        env={**os.environ, "KUBECONFIG": kubeconfig, **env}, log_path=tmp / "operator.log"
    )
    op.start()
    try:
        yield op
    finally:
        op.stop()


def client_for(
    server: KubeServer, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> dynamic.DynamicClient:
    """A dynamic client of ``server`` (``namespace`` as the context's), for the tests' requests."""
    path = server.kubeconfig(tmp_path_factory.mktemp("client") / "kubeconfig", namespace)
    return dynamic.DynamicClient(config.new_client_from_config(config_file=str(path)))


def create(
    kube: dynamic.DynamicClient, namespace: str, kind: str, doc: dict[str, Any]
) -> dict[str, Any]:
    """Create the ``sarl.dev/v1alpha1`` ``kind`` ``doc`` in ``namespace``; the stored object."""
    made = kube.resources.get(api_version="sarl.dev/v1alpha1", kind=kind).create(
        body=doc, namespace=namespace
    )
    return dict(made.to_dict())


def merge(
    kube: dynamic.DynamicClient, namespace: str, api_version: str, kind: str, name: str, body: Any
) -> None:
    """A JSON merge patch of ``kind`` ``name`` (as a controller writing a status would)."""
    kube.resources.get(api_version=api_version, kind=kind).patch(
        body=body, name=name, namespace=namespace, content_type="application/merge-patch+json"
    )


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """The condition ``type_`` of ``status``, or None."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None
