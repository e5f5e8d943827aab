"""``sarl serve`` reaches the sdk CLI through the ``sarl.cli`` entry point, cheaply and safely."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import typer

from sarl.cli import main as cli_main


def _run(*code_or_args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *code_or_args], capture_output=True, text=True, timeout=60, check=False
    )


def test_serve_is_listed_without_importing_kserve() -> None:
    probe = (
        "import sys; from sarl.cli.main import app; "
        "import typer.main; group = typer.main.get_group(app); "
        "print('serve' in group.commands, 'kserve' in sys.modules, 'torch' in sys.modules)"
    )
    result = _run("-c", probe)
    assert result.stdout.split() == ["True", "False", "False"], result.stderr
    assert result.stderr == ""


def test_broken_plugin_costs_one_warning_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = EntryPoint(name="broken", value="no_such_module_xyz:app", group="sarl.cli")
    monkeypatch.setattr(cli_main, "entry_points", lambda group: [broken])
    target = typer.Typer()
    cli_main.add_plugins(target)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("warning: sarl CLI plugin 'broken' not loaded: No module named")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["reward", "--embedder", "openai"], "needs --embedding-url and --embedding-model"),
        (
            [
                "reward",
                "--embedder",
                "openai",
                "--embedding-url",
                "ftp://x",
                "--embedding-model",
                "m",
            ],
            "http(s) URL",
        ),
        (["embedding", "--model", "/no/such/dir"], "--model: '/no/such/dir' is not a local"),
        (["reward", "--max-setting", "structure.max_steps"], "expected REWARD.FIELD=NUMBER"),
        (["reward", "--max-setting", "structure.max_steps=lots"], "expected REWARD.FIELD=NUMBER"),
        (["reward", "--max-setting", "rlkd.decomposer=1"], "not a per-request setting"),
        (
            ["reward", "--reward-settings", "structure={structure}"],
            "'embedder' is set with --embedder",
        ),
        (
            ["embedding", "--deadline-s", "0"],
            "--deadline-s: must be a number of seconds > 0, got 0",
        ),
        (["embedding", "--deadline-s", "nan"], "--deadline-s: must be a number of seconds > 0"),
        (["reward", "--deadline-s", "-3"], "--deadline-s: must be a number of seconds > 0, got -3"),
        (["embedding", "--max-batch-size", "0"], "--max-batch-size: must be >= 1, got 0"),
        (["embedding", "--batch-size", "0"], "--max-batch-size: must be >= 1, got 0"),
        (["embedding", "--max-batch-tokens", "-5"], "--max-batch-tokens: must be >= 1, got -5"),
        (["embedding", "--batch-wait-ms", "20000"], "--batch-wait-ms: must be between 0 and 10000"),
        (["embedding", "--torch-threads", "0"], "--torch-threads: must be >= 1, got 0"),
    ],
)
def test_bad_settings_exit_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    structure = tmp_path / "structure.json"
    structure.write_text('{"embedder": {"kind": "openai", "url": "http://x", "model": "m"}}')
    args = [a.format(structure=structure) for a in args]
    result = _run("-m", "sarl.cli.main", "serve", *args)
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
