"""verl resumes without full pickle: every file of its checkpoints loads with
``weights_only=True`` (:mod:`sarl_jobs.safe_load`), and a planted one runs nothing.

Real objects on CPU: a two-layer model sharded with FSDP2 (``fully_shard``, DTensor shards) in a
one-process gloo group, its AdamW state, an LR scheduler, verl's own RNG state
(``BaseCheckpointManager.get_rng_state``) and a ``StatefulDataLoader``'s state, written as verl
0.9.1's ``FSDPCheckpointManager.save_checkpoint`` writes them
(``verl/utils/checkpoint/fsdp_checkpoint_manager.py``: ``torch.save`` of ``model.state_dict()``,
``optimizer.state_dict()`` and ``{"lr_scheduler": ..., "rng": ...}`` under
``{model,optim,extra_state}_world_size_W_rank_R.pt``) and read back by verl's real
``load_checkpoint``. Runs in ``.venv-verl``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

import torch
import torch.distributed as dist

from sarl_jobs import safe_load


class Plant:
    """Unpickling this creates ``path``: what a planted checkpoint file would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A one-process gloo group (a file store: no port to collide with)."""
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _trained(seed: int) -> tuple[Any, Any, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def _save_like_verl(root: Path, model: Any, optimizer: Any, scheduler: Any) -> None:
    from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

    root.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), root / "model_world_size_1_rank_0.pt")
    torch.save(optimizer.state_dict(), root / "optim_world_size_1_rank_0.pt")
    extra = {"lr_scheduler": scheduler.state_dict(), "rng": BaseCheckpointManager.get_rng_state()}
    torch.save(extra, root / "extra_state_world_size_1_rank_0.pt")


def _manager(model: Any, optimizer: Any, scheduler: Any) -> Any:
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    return FSDPCheckpointManager(model, optimizer, lr_scheduler=scheduler)


@pytest.fixture
def installed() -> Iterator[list[str]]:
    """verl's loaders guarded; afterwards the real torch again (other tests use verl)."""
    import importlib

    modules = [importlib.import_module(name) for name in safe_load.VERL_LOADERS]
    yield safe_load.install()
    for module in modules:
        module.torch = torch  # type: ignore[attr-defined]


def test_verls_own_load_restores_a_real_checkpoint_with_weights_only(
    group: None, installed: list[str], tmp_path: Path
) -> None:
    saved = _trained(seed=0)
    _save_like_verl(tmp_path / "actor", *saved)
    model, optimizer, scheduler = _trained(seed=1)
    torch.random.manual_seed(123)  # the RNG the checkpoint must restore is another

    _manager(model, optimizer, scheduler).load_checkpoint(str(tmp_path / "actor"))

    for (name, want), got in zip(
        saved[0].state_dict().items(), model.state_dict().values(), strict=True
    ):
        assert torch.equal(want.full_tensor(), got.full_tensor()), name
    assert optimizer.state_dict()["state"][0]["step"] == 1
    assert scheduler.state_dict()["last_epoch"] == saved[2].state_dict()["last_epoch"]


def test_the_rng_state_needs_the_numpy_allowlist(group: None, tmp_path: Path) -> None:
    """Why :data:`safe_load.NUMPY_GLOBALS`: plain weights_only refuses NumPy's RNG array."""
    _save_like_verl(tmp_path, *_trained(seed=0))
    extra = tmp_path / "extra_state_world_size_1_rank_0.pt"
    with pytest.raises(Exception, match="numpy"):
        torch.load(extra, weights_only=True)
    loaded = safe_load.safe_load(str(extra))
    assert set(loaded) == {"lr_scheduler", "rng"}


def test_the_dataloader_state_loads_with_weights_only(tmp_path: Path) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(list(range(10)), batch_size=2, shuffle=True)
    next(iter(loader))
    torch.save(loader.state_dict(), tmp_path / "data.pt")
    loaded = safe_load.safe_load(str(tmp_path / "data.pt"))
    assert loaded.keys() == loader.state_dict().keys()


@pytest.mark.parametrize(
    "name",
    ["model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt",
     "extra_state_world_size_1_rank_0.pt"],
)  # fmt: skip
def test_a_planted_shard_is_refused_by_verls_load_and_runs_nothing(
    group: None, installed: list[str], tmp_path: Path, name: str
) -> None:
    saved = _trained(seed=0)
    _save_like_verl(tmp_path / "actor", *saved)
    marker = tmp_path / "marker"
    torch.save({"state": Plant(marker)}, tmp_path / "actor" / name)

    with pytest.raises(safe_load.UnsafeCheckpointFile, match="refusing to load it") as refused:
        _manager(*_trained(seed=1)).load_checkpoint(str(tmp_path / "actor"))

    assert name in str(refused.value)
    assert "GLOBAL posix.mkdir" in str(refused.value)
    assert not marker.exists()


def test_install_guards_every_resume_loader_of_verl_and_is_idempotent(installed: list[str]) -> None:
    import importlib

    assert installed == list(safe_load.VERL_LOADERS)
    assert safe_load.install() == installed
    for name in safe_load.VERL_LOADERS:
        module = importlib.import_module(name)
        assert module.torch.load is safe_load.safe_load
        assert module.torch.distributed is torch.distributed  # everything else is torch's


def test_rays_setup_hook_loader_runs_install() -> None:
    """The name put in ``runtime_env.worker_process_setup_hook`` is one Ray 2.60.0 can load and
    call (``ray/_private/runtime_env/setup_hook.py``, ``load_and_execute_setup_hook_module``)."""
    import importlib

    from ray._private.runtime_env.setup_hook import load_and_execute_setup_hook_module

    from sarl.integrations.verl.config import SAFE_LOAD_HOOK

    try:
        assert load_and_execute_setup_hook_module(SAFE_LOAD_HOOK) is None
        module = importlib.import_module(safe_load.VERL_LOADERS[0])
        assert module.torch is safe_load.SAFE_TORCH
    finally:
        for name in safe_load.VERL_LOADERS:
            importlib.import_module(name).torch = torch
