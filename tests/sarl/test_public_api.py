"""What ``import sarl`` offers (its ``__all__``): each name is the object of the one module that
defines it, loaded on first use, so ``import sarl`` imports none of them."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sarl

HOMES = {
    "Client": "sarl.client",
    "Experiment": "sarl.spec.experiment",
    "ExperimentInfo": "sarl.cluster.models",
    "ExperimentNotFound": "sarl.cluster.errors",
    "SpecError": "sarl.spec.loader",
    "compare": "sarl.tracking.compare",
    "create_reward": "sarl.rewards.registry",
    "parse_sample": "sarl.rewards.samples",
    "reasoning_maps": "sarl.viz.map_gallery",
}


def test_all_lists_the_exports() -> None:
    assert sorted(sarl.__all__) == sorted([*HOMES, "__version__"])


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_export_is_its_modules_object(name: str) -> None:
    import importlib

    assert getattr(sarl, name) is getattr(importlib.import_module(HOMES[name]), name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sarl.nope  # noqa: B018


def test_import_sarl_loads_none_of_them() -> None:
    code = "import sys, sarl; print(sorted(m for m in sys.modules if m.startswith('sarl.')))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
