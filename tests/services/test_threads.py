"""torch thread settings of the embedding service (sarl_services.threads): cores by affinity and
cgroup quota, one inter-op thread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sarl_services import threads


@pytest.mark.parametrize(
    ("cpu_max", "limit"), [("max 100000\n", None), ("150000 100000\n", 1.5), ("200000 100000", 2.0)]
)
def test_cgroup_v2_quota(tmp_path: Path, cpu_max: str, limit: float | None) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max)
    assert threads.cgroup_cpu_limit(tmp_path) == limit


@pytest.mark.parametrize(("quota", "limit"), [("-1", None), ("50000", 0.5), ("300000", 3.0)])
def test_cgroup_v1_quota(tmp_path: Path, quota: str, limit: float | None) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(quota)
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert threads.cgroup_cpu_limit(tmp_path) == limit


def test_no_cgroup_files_means_no_limit(tmp_path: Path) -> None:
    assert threads.cgroup_cpu_limit(tmp_path) is None


@pytest.mark.parametrize(
    ("limit", "expected"), [(None, 8), (2.0, 2), (1.5, 2), (0.2, 1), (64.0, 8)]
)
def test_usable_cores_is_affinity_capped_by_the_quota_rounded_up(
    monkeypatch: pytest.MonkeyPatch, limit: float | None, expected: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda: limit)
    assert threads.usable_cores() == expected


def test_configure_threads_sets_torch_intra_op_threads() -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        assert threads.configure_threads(1) == 1
        assert torch.get_num_threads() == 1
        assert threads.configure_threads(None) == threads.usable_cores()
        assert torch.get_num_threads() == threads.usable_cores()
    finally:
        torch.set_num_threads(before)
