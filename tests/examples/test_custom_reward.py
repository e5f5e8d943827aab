"""The worked custom reward (``examples/custom_reward``, docs/how-to/add-a-reward.md) goes from
its package to ``sarl rewards``, ``sarl reward score``, ``sarl validate`` and ``sarl run
--local`` (issue 40 item 2).

The package is really installed, with pip, into a temporary directory put on ``PYTHONPATH``
(the shared virtual environment stays as it is), so its reward is found by name through its
``sarl.rewards`` entry point exactly as after ``pip install ./examples/custom_reward``. The
commands run as subprocesses; the local run trains the tiny policy for one step and its metrics
are read back from the run's MLflow store.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.small import EXAMPLES

PACKAGE = EXAMPLES / "custom_reward"
TRACES = EXAMPLES / "traces" / "grouped_math.jsonl"
SDK_SRC = EXAMPLES.parent / "sdk" / "src"
#: Offline, into a target directory: the package needs nothing beyond sarl and setuptools.
PIP_INSTALL = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
PIP_INSTALL += ["--no-index"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package installed with pip into a fresh directory (built from a copy: pip
    builds in the source tree, which must stay clean)."""
    root = tmp_path_factory.mktemp("custom_reward")
    shutil.copytree(PACKAGE, root / "src")
    target = root / "site"
    subprocess.run(
        [*PIP_INSTALL, "--target", str(target), str(root / "src")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def sarl(site: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{SDK_SRC}", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "sarl.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_listed_by_name(site: Path) -> None:
    proc = sarl(site, "rewards")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("answer_length "))
    summary = "Closeness of the response's length in words to a target number of words."
    assert line.split(None, 1)[1] == summary


def test_scores_the_example_traces(site: Path, tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("target: 30\n")
    proc = sarl(site, "reward", "score", "answer_length", "-i", str(TRACES), "-s", str(settings))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in TRACES.read_text().splitlines() if x.strip()]
    scored = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [s["words"] for s in scored] == [len(r["response"].split()) for r in rows]
    assert [s["score"] for s in scored] == [max(0.0, 1 - abs(s["words"] - 30) / 30) for s in scored]
    assert len({s["score"] for s in scored}) > 1  # the reward tells the responses apart


def test_a_settings_typo_is_refused_naming_the_field(site: Path) -> None:
    spec = str(PACKAGE / "local.yaml")
    assert sarl(site, "validate", spec).returncode == 0
    proc = sarl(site, "validate", spec, "--set", "spec.reward[1].settings.targte=3")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: {spec}: spec.reward[1].settings.targte: unknown setting; did you mean 'target'?"
    )


def test_the_cluster_spec_validates_with_the_package_installed(site: Path) -> None:
    """``sarl validate`` imports the reward named by path, so its settings are checked."""
    spec = str(PACKAGE / "cluster.yaml")
    assert sarl(site, "validate", spec).returncode == 0
    proc = sarl(site, "validate", spec, "--set", "spec.reward[1].settings.target=0")
    assert proc.returncode == 2 and "spec.reward[1].settings.target" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_trains_locally_with_it(site: Path, tmp_path: Path) -> None:
    import mlflow

    workdir = tmp_path / "state"
    small = {
        "model.warm_start.steps": 10,
        "data.train_size": 8,
        "data.eval_size": 2,
        "algorithm.rollouts_per_prompt": 2,
        "algorithm.train_batch_size": 2,
        "algorithm.mini_batch_size": 2,
        "algorithm.max_response_length": 24,
        "algorithm.max_steps": 1,
        "evaluation.k": 1,
        "evaluation.max_problems": 2,
    }
    sets = [arg for key, value in small.items() for arg in ("--set", f"spec.{key}={value}")]
    spec = str(PACKAGE / "local.yaml")
    proc = sarl(site, "run", spec, "--local", "--workdir", str(workdir), *sets, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    (run,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string="attributes.run_name = 'answer-length'",
    )
    metrics = run.data.metrics
    assert 0.0 <= metrics["reward/answer_length"] <= 1.0
    assert metrics["answer_length/words"] > 0  # its component reached the tracking too


CLUSTER_CHECK = """
import sys
from sarl.rewards.cluster_names import validating_for_cluster
from sarl.rewards.registry import RewardConfigError, get_reward_class
with validating_for_cluster(sys.argv[1:]):
    try:
        cls = get_reward_class("answer_length")
        print("stand-in", cls.__name__, cls.name)
    except RewardConfigError as e:
        print("refused", e)
print("imported" if "answer_length_reward" in sys.modules else "not imported")
"""


@pytest.mark.parametrize(
    ("allowed", "first"),
    [
        ([], "refused reward: on a cluster a reward is a registered name"),
        (["answer_length_reward"], "stand-in UnimportedReward answer_length_reward.reward:"),
    ],
)
def test_on_a_cluster_its_name_is_its_path_never_imported(
    site: Path, allowed: list[str], first: str
) -> None:
    """An installed entry point is checked on a cluster as the path it names (the platform's
    allow-list decides) and never imported, like a dotted name in the spec."""
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{SDK_SRC}"}
    proc = subprocess.run(
        [sys.executable, "-c", CLUSTER_CHECK, *allowed],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(first) and lines[1] == "not imported"


PAGE = EXAMPLES.parent / "docs" / "how-to" / "add-a-reward.md"


def _blocks(language: str) -> list[str]:
    """The fenced ``language`` blocks of the page, dedented."""
    import re
    import textwrap

    fence = re.compile(r"^( *)```" + language + r"\n(.*?)^\1```", re.S | re.M)
    return [textwrap.dedent(m.group(2)) for m in fence.finditer(PAGE.read_text())]


def test_the_page_shows_the_example_files_as_they_are() -> None:
    reward = PACKAGE / "src" / "answer_length_reward" / "reward.py"
    assert _blocks("python")[0] == reward.read_text()
    assert _blocks("toml")[0] in (PACKAGE / "pyproject.toml").read_text()
    assert _blocks("dockerfile") == [(PACKAGE / "Dockerfile").read_text()]


def test_the_pages_test_snippet_runs(site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{SDK_SRC}"}
    proc = subprocess.run(
        [sys.executable, "-c", _blocks("python")[1]],
        capture_output=True,
        text=True,
        env=env,
        cwd=EXAMPLES.parent,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[") and len(json.loads(proc.stdout)) > 1


def test_the_pages_commands_run(site: Path, tmp_path: Path) -> None:
    """Each ``sarl`` line of the page, from a directory holding ``examples/`` and the page's
    ``settings.yaml``; ``pip install`` is the ``site`` fixture's, and ``sarl run --local`` is
    :func:`test_trains_locally_with_it` (at a CI size)."""
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    (tmp_path / "settings.yaml").write_text("target: 30\n")
    lines = [x for block in _blocks("bash") for x in block.splitlines() if x.startswith("sarl ")]
    assert len(lines) == 6 and sum("run" in x and "--local" in x for x in lines) == 1
    for line in lines:
        if "--local" in line:
            continue
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{SDK_SRC}"}
        proc = subprocess.run(
            [sys.executable, "-m", "sarl.cli.main", *line.split()[1:]],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, f"{line}: {proc.stderr[-2000:]}"
