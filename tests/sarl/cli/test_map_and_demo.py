"""``sarl map`` and ``sarl demo-traces`` write real PNG reasoning maps; ``sarl demo`` is the
old name of the latter (hidden), which says the new one first (issue 40 item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sarl.cli.conftest import RunCli, jsonl

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_map_writes_a_png_for_the_indexed_line(run_cli: RunCli, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(jsonl([{"step_labels": [0, 1]}, {"step_labels": [0, 1, 2, 0, 3]}]))
    out = tmp_path / "maps" / "m.png"
    proc = run_cli("map", "--input", str(src), "--index", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert out.stat().st_size > 10_000
    assert "nodes=4" in proc.stdout


@pytest.mark.parametrize(("index", "message"), [(5, "--index: 5 is out of range"), (-1, "--index")])
def test_map_index_out_of_range(run_cli: RunCli, tmp_path: Path, index: int, message: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(jsonl([{"step_labels": [0, 1]}]))
    proc = run_cli(
        "map", "--input", str(src), "--index", str(index), "--out", str(tmp_path / "x.png")
    )
    assert proc.returncode == 2
    assert message in proc.stderr


@pytest.mark.slow
def test_demo_scores_bundled_samples_and_writes_one_png_each(
    run_cli: RunCli, tmp_path: Path
) -> None:
    proc = run_cli("demo-traces", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    pngs = sorted(tmp_path.glob("*.png"))
    assert len(pngs) == 6
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in pngs)
    for column in ("score", "C", "L", "steps", "nodes", "edges"):
        assert column in proc.stdout
    assert len((tmp_path / "scores.jsonl").read_text().splitlines()) == 6


def test_the_old_demo_name_says_the_new_one_and_still_runs(run_cli: RunCli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')  # refused before any scoring: the command ran, quickly
    proc = run_cli("demo", "--input", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "note: `sarl demo` is now `sarl demo-traces` (`make demo` runs the local Study); the "
        "old name will be removed",
        "error: sample 0: expected an object with a string 'response'",
    ]
    listed = run_cli("-h").stdout
    assert "demo-traces" in listed and " demo " not in listed
