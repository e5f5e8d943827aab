"""The generated pages of docs/reference/ and what builds each (used by tools.refdocs.__main__
and tests/docs)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from tools.refdocs.cli_ref import cli_page
from tools.refdocs.crd_ref import crd_page
from tools.refdocs.helm_ref import helm_page
from tools.refdocs.imports_ref import imports_page
from tools.refdocs.python_api import python_api_page
from tools.refdocs.services_ref import services_page
from tools.refdocs.spec_ref import rewards_page, spec_page

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"

Builder = Callable[[], tuple[str, list[str]]]

#: file name under docs/reference/ -> its builder (the page text, the undocumented items)
PAGES: dict[str, Builder] = {
    "cli.md": cli_page,
    "spec.md": spec_page,
    "rewards.md": rewards_page,
    "crds.md": partial(crd_page, ROOT),
    "helm-values.md": partial(helm_page, ROOT),
    "services-api.md": services_page,
    "python-api.md": python_api_page,
    "imports.md": partial(imports_page, ROOT),
}
