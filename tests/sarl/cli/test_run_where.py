"""``sarl run`` / ``sarl study run`` without ``--local`` (issue 40 item 7; ``sarl.cli.where``),
and ``--set`` on ``sarl study run`` with the same meaning as on ``sarl run``.

Real CLI processes. The cluster configuration is what the process environment points at: no
kubeconfig file and no ``KUBERNETES_SERVICE_HOST`` (nothing configured), or a kubeconfig file
naming an unreachable server (configured; nothing is contacted). Each run stops at preflight
(``algorithm.name=ppo`` is refused for local runs in a second), after the decision to train here
was made and said, so nothing trains.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "c",
    "users": [{"name": "u", "user": {}}],
}


def _sarl(tmp_path: Path, *args: str, kubeconfig: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["HOME"] = str(tmp_path / "home")
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    if kubeconfig:
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(KUBECONFIG))
    cmd = [sys.executable, "-m", "sarl.cli.main", *args, "--workdir", str(tmp_path / "wd")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def _experiment(tmp_path: Path) -> Path:
    doc = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "here"},
        "spec": {"preset": "local-grpo-arithmetic"},
    }
    path = tmp_path / "here.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _study(tmp_path: Path) -> Path:
    doc = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": "st"},
        "spec": {"base": {"preset": "local-grpo-arithmetic"}, "arms": [{"name": "a"}]},
    }
    path = tmp_path / "st.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


PPO = "spec.algorithm.name='ppo': PPO (GAE + critic) runs on the verl backend"


@pytest.mark.parametrize("command", ["run", "study run"])
def test_without_a_cluster_it_trains_here_and_says_so(tmp_path: Path, command: str) -> None:
    source = _experiment(tmp_path) if command == "run" else _study(tmp_path)
    proc = _sarl(tmp_path, *command.split(), str(source), "--set", "algorithm.name=ppo",
                 kubeconfig=False)  # fmt: skip
    name = "here" if command == "run" else "st"
    assert proc.stderr.splitlines()[0] == (
        f"{name}: no cluster configured (no kubeconfig, not in a pod): training here, as --local "
        "does"
    ), proc.stderr
    assert PPO in proc.stderr  # it went on to the local run's preflight
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["run", "study run"])
def test_with_a_cluster_configured_it_names_both_ways(tmp_path: Path, command: str) -> None:
    source = _experiment(tmp_path) if command == "run" else _study(tmp_path)
    proc = _sarl(tmp_path, *command.split(), str(source), kubeconfig=True)
    name = "here" if command == "run" else "st"
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: sarl {command} {source}: a cluster is configured (kubeconfig "
        f"{tmp_path / 'kubeconfig'}); add --local to train {name!r} here, or run it there with "
        f"`sarl submit {source}`\n"
    )


def test_study_run_takes_set_like_run(tmp_path: Path) -> None:
    """``--set`` reaches every arm x seed (``spec.base.`` may be left out, as ``spec.`` may)."""
    for key in ("spec.base.algorithm.name", "algorithm.name"):
        proc = _sarl(tmp_path, "study", "run", str(_study(tmp_path)), "--local", "--set",
                     f"{key}=ppo", kubeconfig=False)  # fmt: skip
        assert proc.returncode == 2 and PPO in proc.stderr, proc.stderr
