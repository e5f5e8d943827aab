"""Every arm x seed of the example Studies gets at least the pod resources of the paper preset
for its algorithm: an arm that switches the algorithm (e.g. GRPO -> PPO, whose critic checkpoints
add ~48 GB each) does not keep the base preset's smaller scratch disk and get evicted mid-run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_study
from sarl.spec.presets import PRESETS

STUDIES = sorted((Path(__file__).resolve().parents[2] / "examples" / "studies").glob("*.yaml"))
_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6}
_UNITS |= {"G": 10**9, "T": 10**12}


def _bytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def _paper_preset(run: Experiment, base_preset: str | None) -> str | None:
    """paper-<algorithm>-<task> for a run whose Study builds on a paper preset."""
    match = re.fullmatch(r"paper-[a-z]+-(.+)", base_preset or "")
    if not match:
        return None
    name = f"paper-{run.spec.algorithm.name}-{match.group(1)}"
    return name if name in PRESETS else None


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_run_has_its_algorithms_paper_resources(path: Path) -> None:
    study = load_study(path)
    checked = 0
    for run in study.runs():
        preset = _paper_preset(run.experiment, study.spec.base.preset)
        if preset is None:
            continue
        wanted = Experiment.model_validate(
            {"metadata": {"name": "x"}, "spec": {"preset": preset}}
        ).spec.resources
        got = run.experiment.spec.resources
        for field in ("cpu", "memory", "scratch_size"):
            assert _bytes(getattr(got, field)) >= _bytes(getattr(wanted, field)), (
                f"{path.name}: run {run.name} ({run.experiment.spec.algorithm.name}) has "
                f"resources.{field}={getattr(got, field)}, below {preset}'s "
                f"{getattr(wanted, field)}"
            )
        checked += 1
    if study.spec.base.preset and study.spec.base.preset.startswith("paper-"):
        assert checked == len(study.runs())
