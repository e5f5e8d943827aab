"""The image requirement check (tests/images/resolve.py), offline: parsing and the assertions.

The resolver run itself needs PyPI and runs in CI as ``make check-images``. Here the reports are
small fixtures whose ``requires_dist`` lines are copied from the packages' real metadata, as pip's
report gave them (verl 0.9.1, vLLM 0.17.0 / 0.24.0, KServe 0.21.0, TRL 1.16.0 wheels on PyPI).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.images.resolve import (
    ROOT,
    ImageCheckError,
    check_report,
    conflict_summary,
    dockerfiles,
    parse_dockerfile,
    pip_command,
    target_only_requirements,
)

VERL_091 = {
    "name": "verl",
    "version": "0.9.1",
    "requires_dist": [
        "transformers!=5.6.0,<5.11,>=5.5.3",
        "transformers; extra == 'verl-core'",
        "verl[verl-core]; extra == 'vllm'",
        "torch==2.11.0; extra == 'vllm'",
        "vllm==0.24.0; extra == 'vllm'",
        "mbridge; extra == 'vllm'",
        "transformers==5.9.0; extra == 'vllm'",
        "torch==2.11.0; extra == 'sglang'",
    ],
}
VLLM_0170 = {
    "name": "vllm",
    "version": "0.17.0",
    "requires_dist": ["transformers<5,>=4.56.0", "torch==2.10.0"],
}
VLLM_0240 = {
    "name": "vllm",
    "version": "0.24.0",
    "requires_dist": ["transformers>=5.5.3", "torch==2.11.0", "zentorch==2.11.0.0; extra == 'zen'"],
}


def _pkg(name: str, version: str, *requires: str) -> dict[str, object]:
    return {"name": name, "version": version, "requires_dist": list(requires)}


def test_old_verl_image_is_refused() -> None:
    """What the old verl.Dockerfile left in its image: vLLM 0.17 and torch 2.10 from the
    ``vllm017`` base, verl 0.9.1 on top, transformers upgraded by pip for verl."""
    report = {
        "install": [
            VERL_091,
            VLLM_0170,
            _pkg("transformers", "5.10.4"),
            _pkg("torch", "2.10.0"),
        ]
    }
    problems = check_report(report, "3.12")
    text = "\n".join(problems)
    assert "vllm 0.17.0 requires transformers<5,>=4.56.0 (its metadata)" in text
    assert "verl 0.9.1 requires vllm>=0.18.0 (verl/third_party/vllm/__init__.py" in text
    assert 'verl 0.9.1 requires vllm==0.24.0; extra == "vllm" (its tested stack' in text
    assert 'verl 0.9.1 requires torch==2.11.0; extra == "vllm"' in text


def test_new_verl_image_is_accepted() -> None:
    report = {
        "install": [
            VERL_091,
            VLLM_0240,
            _pkg("transformers", "5.9.0"),
            _pkg("torch", "2.11.0"),
        ]
    }
    assert check_report(report, "3.12") == []


def test_verl_on_an_untested_transformers_is_refused() -> None:
    """transformers 5.10.4 satisfies verl's range but not the 5.9.0 of its vllm extra."""
    report = {
        "install": [VERL_091, VLLM_0240, _pkg("transformers", "5.10.4"), _pkg("torch", "2.11.0")]
    }
    assert check_report(report, "3.12") == [
        'verl 0.9.1 requires transformers==5.9.0; extra == "vllm" (its tested stack, extra '
        "'vllm'); the image has transformers 5.10.4"
    ]


@pytest.mark.parametrize(
    ("packages", "expected"),
    [
        (
            [_pkg("kserve", "0.21.0", "protobuf<7.0.0,>=6.33.5"), _pkg("protobuf", "7.34.0")],
            "kserve 0.21.0 requires protobuf<7.0.0,>=6.33.5 (its metadata); the image has "
            "protobuf 7.34.0",
        ),
        (
            [_pkg("trl", "1.16.0", "transformers>=4.56.2"), _pkg("transformers", "4.55.0")],
            "trl 1.16.0 requires transformers>=4.56.2 (its metadata); the image has "
            "transformers 4.55.0",
        ),
        (
            [_pkg("trl", "1.16.0", "accelerate>=1.10.1")],
            "trl 1.16.0 requires accelerate>=1.10.1 (its metadata); missing",
        ),
    ],
)
def test_metadata_ranges_are_enforced(packages: list[dict[str, object]], expected: str) -> None:
    assert check_report({"install": packages}, "3.11") == [expected]


def test_markers_follow_the_image_python() -> None:
    pkg = _pkg("a", "1", "tomli>=2; python_version < '3.11'", "zentorch; extra == 'zen'")
    assert check_report({"install": [pkg]}, "3.11") == []
    assert check_report({"install": [pkg]}, "3.10") == [
        'a 1 requires tomli>=2; python_version < "3.11" (its metadata); missing'
    ]


def test_verl_dockerfile_set() -> None:
    spec = parse_dockerfile(ROOT / "jobs/docker/verl.Dockerfile")
    assert spec.from_image == spec.base.image == "verlai/verl:vllm024.dev2"
    requirements = spec.requirements()
    # transformers is named on the pip line, so it replaces the base's 5.3.0.
    assert "transformers==5.9.0" in requirements
    assert "transformers==5.3.0" not in requirements
    assert {"vllm==0.24.0", "torch==2.11.0", "verl==0.9.1"} <= set(requirements)
    # Local packages are read from their pyproject files, not built.
    assert not any(r.startswith(("./", "sarl")) for r in requirements)
    assert "math-verify>=0.9" in requirements and "mlflow>=3" in requirements
    command = pip_command(spec, Path("r.json"))
    assert command[command.index("--python-version") + 1] == "3.12"
    assert "manylinux_2_39_x86_64" in command and "manylinux_2_28_x86_64" in command


@pytest.mark.parametrize("dockerfile", dockerfiles(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_image_has_a_base_file_naming_its_from(dockerfile: Path) -> None:
    spec = parse_dockerfile(dockerfile)
    assert spec.installs, f"{dockerfile}: no pip install found"


def test_base_file_of_another_image_is_refused(tmp_path: Path) -> None:
    dockerfile = tmp_path / "x.Dockerfile"
    dockerfile.write_text("ARG BASE_IMAGE=verlai/verl:vllm017.latest\nFROM ${BASE_IMAGE}\n")
    (tmp_path / "x.Dockerfile.base.txt").write_text(
        "# image: verlai/verl:vllm024.dev2\n# python: 3.12\n# glibc: 2.39\n"
    )
    with pytest.raises(ImageCheckError, match=r"FROM verlai/verl:vllm017.latest but .*vllm024"):
        parse_dockerfile(dockerfile)


def test_missing_base_file_is_named(tmp_path: Path) -> None:
    dockerfile = tmp_path / "x.Dockerfile"
    dockerfile.write_text("FROM python:3.11-slim\nRUN pip install httpx\n")
    with pytest.raises(ImageCheckError, match=r"x.Dockerfile.base.txt: missing"):
        parse_dockerfile(dockerfile)


def test_conflict_summary_keeps_the_cause() -> None:
    """Output of the resolver on the old verl.Dockerfile's set (pip 26.3)."""
    output = (
        "Collecting verl==0.9.1\n"
        "ERROR: Cannot install transformers<5.11, verl==0.9.1 and vllm==0.17.0 because these "
        "package versions have conflicting dependencies.\n\n"
        "The conflict is caused by:\n"
        "    vllm 0.17.0 depends on transformers<5 and >=4.56.0\n"
        "    verl 0.9.1 depends on transformers!=5.6.0, <5.11 and >=5.5.3\n\n"
        "To fix this you could try to:\n"
        "1. loosen the range of package versions you've specified\n"
    )
    summary = conflict_summary(output)
    assert "Collecting" not in summary and "loosen" not in summary
    assert "vllm 0.17.0 depends on transformers<5" in summary


def test_markers_for_the_image_python_are_fed_back() -> None:
    """pip evaluates markers for the Python it runs on: vLLM 0.24.0's
    ``setuptools<81.0.0,>=77.0.3; python_version > "3.11"`` was skipped by a 3.11 pip resolving
    the verl image (Python 3.12), which then got setuptools 81.0.0."""
    report = {
        "install": [_pkg("vllm", "0.24.0", 'setuptools<81.0.0,>=77.0.3; python_version > "3.11"')]
    }
    host_skips = sys.version_info < (3, 12)
    expected = ["setuptools<81.0.0,>=77.0.3"] if host_skips else []
    assert target_only_requirements(report, "3.12") == expected
    assert target_only_requirements(report, "3.11") == []
