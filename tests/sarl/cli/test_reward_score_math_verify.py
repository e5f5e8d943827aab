"""``sarl reward score ground_truth_math_verify``: hostile lines cost their timeout, not a new
worker's start-up grace each (before: 61 s per hostile line at ``timeout_seconds: 1``).

Runs the real command in a subprocess on a real input that makes math-verify spin. The
subprocess limit is a generous bound against hanging (two hostile lines need about 2 s of
comparisons here, 122 s before); the assertions are the results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("math_verify")

HOSTILE = {"response": "\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "ground_truth": "3"}
NORMAL = {"response": "\\boxed{0.5}", "ground_truth": "1/2"}


def test_hostile_lines_cost_their_timeout(tmp_path: Path) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps(x) + "\n" for x in (HOSTILE, HOSTILE, NORMAL)))
    settings = tmp_path / "settings.json"
    # 0.5 s: before the item reaches the math-verify workers' memory cap (about 2 s here)
    settings.write_text('{"timeout_seconds": 0.5}')
    command = [sys.executable, "-m", "sarl.cli.main", "reward", "score"]
    command += ["ground_truth_math_verify", "-i", str(lines), "-s", str(settings)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["verifier_timeout"] for r in rows] == [1.0, 1.0, 0.0]
    assert rows[2]["math_verify"] == 1.0 and rows[2]["score"] == 1.0
