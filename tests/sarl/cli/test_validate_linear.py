"""``sarl validate`` on a spec built to make secret detection quadratic (issue 38, finding 7).

The real ``sarl`` in a subprocess (``run_cli``). The subprocess timeout only turns a hang into a
failure; nothing here asserts a time. The rules' linearity, pattern by pattern:
tests/sarl/spec/test_secrets_linear.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.sarl.cli.conftest import RunCli


def test_sarl_validate_on_a_hostile_spec(run_cli: RunCli, tmp_path: Path) -> None:
    """The real ``sarl validate`` on a 66 KB spec whose tag is ``"a:" * n`` (93 s before): it
    prints the spec. The subprocess timeout only turns a hang into a failure."""
    path = tmp_path / "hostile.yaml"
    value = "a:" * 33_000
    path.write_text(
        "apiVersion: sarl.dev/v1alpha1\nkind: Experiment\nmetadata:\n  name: hostile\n"
        f"spec:\n  preset: local-grpo-arithmetic\n  tracking:\n    tags:\n      note: '{value}'\n"
    )
    result = run_cli("validate", str(path), timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "name: hostile" in result.stdout
