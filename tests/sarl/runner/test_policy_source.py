"""A local run's policy from disk: a saved directory, or a Hub id in the Hugging Face cache, with
no download unless ``SARL_ALLOW_DOWNLOADS=1`` (issue 40 item 8; ``sarl.runner.policy_source``).

The model is real: a tiny randomly initialised Qwen3 and its tokenizer (``sarl.runner.tiny``,
no download), written with ``save_pretrained``. The cache is a real huggingface_hub layout
written by the test (``hub/models--acme--tiny/refs/main`` naming a commit,
``snapshots/<commit>/`` holding the files, as ``hf download`` leaves it) because nothing may be
downloaded here; transformers then loads it by path with ``local_files_only``. Before this
module every such spec failed preflight with "not a local model directory".
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sarl.runner.policy_source import (
    PolicyNotFound,
    cached_snapshot,
    hub_cache,
    resolve_policy,
)

pytest.importorskip("transformers")

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 policy and its tokenizer, saved as Hugging Face files."""
    from sarl.runner.tiny import build_tiny_qwen, train_tokenizer
    from sarl.spec.experiment import TinyModel

    tokenizer = train_tokenizer(["What is 1 + 2? <think> 1 + 2 = 3 </think> \\boxed{3}"] * 8, 300)
    model = build_tiny_qwen(tokenizer, TinyModel(), seed=0)
    out = tmp_path_factory.mktemp("saved") / "tiny"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _cache_with(saved: Path, root: Path, repo: str = "acme/tiny") -> Path:
    """``root/hub`` laid out as huggingface_hub's cache holding ``repo`` at ``main``."""
    base = root / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = base / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for f in saved.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(COMMIT)
    return root / "hub"


def test_a_saved_directory_is_loaded_as_is(saved_model: Path) -> None:
    source = resolve_policy(str(saved_model), {})
    assert (source.target, source.offline, source.where) == (str(saved_model), True, "directory")


def test_a_cached_hub_id_is_its_snapshot_and_loads_offline(
    saved_model: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    cache = _cache_with(saved_model, tmp_path)
    for name in ("acme/tiny", "hf://acme/tiny"):
        source = resolve_policy(name, {"HF_HOME": str(tmp_path)})
        assert source.where == "cache" and source.offline
        assert source.target == str(cache / "models--acme--tiny" / "snapshots" / COMMIT)
    model = AutoModelForCausalLM.from_pretrained(source.target, local_files_only=True)
    assert model.config.model_type == "qwen3"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HF_HUB_CACHE": "/c/hub2", "HF_HOME": "/h"}, "/c/hub2"),
        ({"HUGGINGFACE_HUB_CACHE": "/legacy"}, "/legacy"),
        ({"HF_HOME": "/h"}, "/h/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
    ],
)
def test_the_cache_is_the_one_huggingface_hub_uses(env: dict[str, str], expected: str) -> None:
    assert hub_cache(env) == Path(expected)


def test_a_missing_model_is_one_line_naming_the_cache_and_how_to_download(tmp_path: Path) -> None:
    with pytest.raises(PolicyNotFound) as info:
        resolve_policy("acme/absent", {"HF_HOME": str(tmp_path)})
    assert str(info.value) == (
        "spec.model.name='acme/absent': not a directory and not in the Hugging Face cache "
        f"({tmp_path / 'hub' / 'models--acme--absent'}); local runs do not download by "
        "default: set SARL_ALLOW_DOWNLOADS=1 to download it, or fetch it first with "
        "`hf download acme/absent`"
    )
    allowed = resolve_policy("acme/absent", {"HF_HOME": str(tmp_path), "SARL_ALLOW_DOWNLOADS": "1"})
    assert (allowed.target, allowed.offline, allowed.where) == ("acme/absent", False, "download")


def test_a_snapshot_without_config_or_ref_is_not_cached(saved_model: Path, tmp_path: Path) -> None:
    cache = _cache_with(saved_model, tmp_path)
    (cache / "models--acme--tiny" / "snapshots" / COMMIT / "config.json").unlink()
    assert cached_snapshot(cache, "acme/tiny") is None
    assert cached_snapshot(cache, "acme/other") is None


def test_a_missing_directory_path_says_so(tmp_path: Path) -> None:
    with pytest.raises(PolicyNotFound, match=r"^spec.model.name='\./nowhere': no such directory"):
        resolve_policy("./nowhere", {"HF_HOME": str(tmp_path)})


def test_sarl_run_refuses_an_uncached_model_in_one_line(tmp_path: Path) -> None:
    """The CLI: exit 2, one line, no traceback (before: "not a local model directory")."""
    import os
    import subprocess
    import sys

    import yaml

    spec = tmp_path / "x.yaml"
    doc = {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "x"},
        "spec": {"preset": "local-grpo-arithmetic", "model": {"name": "acme/absent"}},
    }
    spec.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    env.pop("SARL_ALLOW_DOWNLOADS", None)
    cmd = [sys.executable, "-m", "sarl.cli.main", "run", str(spec), "--local"]
    cmd += ["--workdir", str(tmp_path / "wd")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "SARL_ALLOW_DOWNLOADS=1" in lines[0] and "models--acme--absent" in lines[0]


@pytest.mark.slow
def test_a_local_run_trains_a_policy_from_the_cache(
    saved_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: ``model.name: acme/tiny`` found in the cache, trained two steps with TRL,
    with the Hub unreachable by configuration (HF_HUB_OFFLINE=1)."""
    mlflow = pytest.importorskip("mlflow")
    from sarl.runner.local import LocalOptions, run_local
    from sarl.spec import load_experiment

    _cache_with(saved_model, tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = f"cached-{uuid.uuid4().hex[:6]}"
    doc = {
        "metadata": {"name": name},
        "spec": {
            "preset": "local-grpo-arithmetic",
            "model": {"name": "acme/tiny"},
            "data": {"train_size": 4, "eval_size": 2, "difficulty": 1},
            "algorithm": {
                "rollouts_per_prompt": 2,
                "train_batch_size": 2,
                "mini_batch_size": 2,
                "max_response_length": 16,
                "max_steps": 2,
            },
            "evaluation": {"k": 1, "every_n_steps": 2, "max_problems": 2},
            "tracking": {"log_maps_every_n_steps": 100},
            "storage": {"every_n_steps": 2},
            "reward": [{"name": "ground_truth"}],
        },
    }
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    opts = LocalOptions(workdir=tmp_path / "wd", tracking_uri=uri, progress=False)
    result = run_local(load_experiment(doc), opts)
    assert result.steps == 2
    run = mlflow.MlflowClient(uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.params["model.name"] == "acme/tiny"
