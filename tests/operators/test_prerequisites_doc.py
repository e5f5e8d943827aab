"""The prerequisites' versions are written once (``sarl_operator.prerequisites``) and every page
that names them agrees (issue 40 item 3): docs/tutorials/first-cluster-run.md shows exactly the
install commands, and no other version of those components; docs/cluster/install.md's table,
the platform chart's values and the e2e test's set-up name the same versions.

Before this, the e2e set-up installed Training Operator v1.9.2 while the operator's message
named v1.9.0, and only Trainer v2 had an install command."""

from __future__ import annotations

import re

import pytest

from sarl_operator import prerequisites as p
from tests.operators.cases import ROOT

PAGE = ROOT / "docs" / "tutorials" / "first-cluster-run.md"
PINNED = {p.TRAINING_OPERATOR, p.TRAINER, p.KSERVE, p.CERT_MANAGER, p.KUEUE}
VERSION = re.compile(r"\bv\d+\.\d+\.\d+\b")


@pytest.mark.parametrize("component", sorted(p.INSTALL))
def test_the_page_shows_each_install_command(component: str) -> None:
    text = PAGE.read_text()
    for line in p.INSTALL[component].splitlines():
        assert f"\n{line}\n" in text, f"{component}: {line}"


def test_the_page_names_no_other_version() -> None:
    assert set(VERSION.findall(PAGE.read_text())) == PINNED


def _row(markdown: str, first_cell: str) -> str:
    return next(line for line in markdown.splitlines() if line.startswith(f"| {first_cell}"))


def test_the_install_page_table_names_the_same_versions() -> None:
    table = (ROOT / "docs" / "cluster" / "install.md").read_text()
    assert p.TRAINING_OPERATOR in _row(table, "Kubeflow Training Operator")
    assert p.TRAINER in _row(table, "Kubeflow Trainer")
    assert p.KUEUE in _row(table, "Kueue")
    assert p.KSERVE in _row(table, "KServe")


def test_the_chart_and_the_e2e_setup_name_the_same_versions() -> None:
    values = (ROOT / "charts" / "sarl-platform" / "values.yaml").read_text()
    assert f"Kueue ({p.KUEUE} tested)" in values
    assert f"Kubeflow Trainer v2 ({p.TRAINER})" in values
    e2e = (ROOT / "tests" / "e2e" / "test_cluster.py").read_text()
    assert set(re.findall(r"training-operator\.git\S*\?ref=(v[\d.]+)", e2e)) == {
        p.TRAINING_OPERATOR
    }
