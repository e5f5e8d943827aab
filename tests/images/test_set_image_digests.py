"""The release workflow's digest writer (.github/scripts/set_image_digests.py): it sets each
image's repository, tag and digest in the charts' values.yaml, changes nothing else (comments
and layout kept, byte for byte), the charts then render the images by digest, and bad input is
refused with a message naming the line or key."""

from __future__ import annotations

import difflib
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".github" / "scripts" / "set_image_digests.py"
NAMES = ("embedding", "reward", "operator", "verl", "trl")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("set_image_digests", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


def _digest(i: int) -> str:
    return "sha256:" + f"{i:x}" * 64


def _lines(owner: str = "acme") -> str:
    return "".join(
        f"{name} ghcr.io/{owner}/sarl-{name} {_digest(i + 1)}\n" for i, name in enumerate(NAMES)
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of both charts, to write into."""
    shutil.copytree(ROOT / "charts", tmp_path / "charts")
    return tmp_path


def test_writes_repository_tag_and_digest_and_nothing_else(tree: Path) -> None:
    module = _script()
    before = {p: p.read_text(encoding="utf-8") for p in tree.glob("charts/*/values.yaml")}
    written = module.apply(module.parse_digests(_lines()), "0.2.0", tree)
    assert sorted(written) == sorted(before)
    for path, old in before.items():
        new = path.read_text(encoding="utf-8")
        changed = [
            line
            for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
        ]
        # Only value lines of the image blocks: every comment line is where it was.
        assert changed and all(
            line[1:].strip().split(":")[0] in ("repository", "tag", "digest") for line in changed
        )
        assert [x for x in old.splitlines() if x.strip().startswith("#")] == [
            x for x in new.splitlines() if x.strip().startswith("#")
        ]
    platform = yaml.safe_load((tree / "charts/sarl-platform/values.yaml").read_text())
    assert platform["operator"]["image"] == {
        "repository": "ghcr.io/acme/sarl-operator",
        "tag": "0.2.0",
        "digest": _digest(3),
        "pullPolicy": "IfNotPresent",
    }
    assert platform["trainer"]["trlImage"]["digest"] == _digest(5)
    inference = yaml.safe_load((tree / "charts/sarl-inference/values.yaml").read_text())
    assert inference["embedding"]["sarlCpu"]["image"]["digest"] == _digest(1)
    assert inference["reward"]["image"]["repository"] == "ghcr.io/acme/sarl-reward"


def test_the_charts_render_what_was_written(tree: Path) -> None:
    import helm_python as helm

    module = _script()
    module.apply(module.parse_digests(_lines()), "0.2.0", tree)
    with helm.Chart.load(tree / "charts" / "sarl-platform") as chart:
        rendered = chart.render(None, name="sarl", namespace="sarl", is_install=True)
    text = rendered["sarl-platform/templates/operator-deployment.yaml"]
    assert f"image: ghcr.io/acme/sarl-operator@{_digest(3)}" in text
    assert f'value: "ghcr.io/acme/sarl-verl@{_digest(4)}"' in text


def test_the_script_runs_as_the_workflow_calls_it(tree: Path) -> None:
    import subprocess

    digests = tree / "digests.txt"
    digests.write_text(_lines())
    args = [sys.executable, str(SCRIPT), "--version", "0.2.0", "--root", str(tree), str(digests)]
    run = subprocess.run(args, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("wrote ") == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_lines().replace("sarl-verl sha256:", "sarl-verl sha1:"), "line 4: digest"),
        (_lines() + "extra ghcr.io/acme/x " + _digest(9) + "\n", "unknown image 'extra'"),
        (_lines().replace("trl ghcr.io", "trl GHCR.io"), "not a lowercase image repository"),
        ("\n".join(_lines().splitlines()[:4]), "no digest for image(s) ['trl']"),
        (_lines() + _lines().splitlines()[0], "listed twice"),
        ("operator " + _digest(1), "expected '<name> <repository> <digest>'"),
    ],
)
def test_bad_input_is_refused_naming_it(text: str, message: str) -> None:
    module = _script()
    with pytest.raises(module.DigestError) as raised:
        module.parse_digests(text)
    assert message in str(raised.value)


def test_a_values_file_without_the_key_is_refused(tree: Path) -> None:
    module = _script()
    values = tree / "charts/sarl-platform/values.yaml"
    values.write_text(values.read_text().replace('    digest: ""\n', "", 1))
    with pytest.raises(module.DigestError, match=r"sarl-platform/values.yaml: .*\['digest'\]"):
        module.apply(module.parse_digests(_lines()), "0.2.0", tree)
