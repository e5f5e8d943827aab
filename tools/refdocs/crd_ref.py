"""reference/crds.md: the Experiment and Study custom resources of the platform chart.

Read from the CRD files ``make generate`` writes (``charts/sarl-platform/crds/*.yaml``): names,
scope, versions, the ``kubectl get`` columns, and every status field the operator writes. The
spec's fields are those of reference/spec.md (the CRD schema is generated from the same model).
A status field without a description is listed as missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tools.refdocs.markdown import code, page, table
from tools.refdocs.schema_rows import missing, rows
from tools.refdocs.spec_ref import field_table


def _names(crd: dict[str, Any]) -> str:
    spec = crd["spec"]
    names = spec["names"]
    versions = ", ".join(v["name"] for v in spec["versions"] if v.get("served"))
    facts = [
        ("API", code(f"{spec['group']}/{versions}")),
        ("Kind", code(names["kind"])),
        ("Scope", spec["scope"]),
        ("Plural / singular", f"{code(names['plural'])} / {code(names['singular'])}"),
        ("Short names", ", ".join(code(n) for n in names.get("shortNames", []))),
        ("Categories", ", ".join(code(n) for n in names.get("categories", []))),
    ]
    return table(("Property", "Value"), facts)


def _columns(version: dict[str, Any]) -> str:
    columns = version.get("additionalPrinterColumns", [])
    return table(
        ("Column", "Type", "From"), ((c["name"], c["type"], code(c["jsonPath"])) for c in columns)
    )


def crd_section(path: Path) -> tuple[str, list[str]]:
    """One CRD's section and its status fields without a description."""
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = version["schema"]["openAPIV3Schema"]
    kind = crd["spec"]["names"]["kind"]
    status = rows(schema["properties"]["status"], prefix="status")
    parts = [
        f"## {kind}",
        schema.get("description", ""),
        _names(crd),
        f"### `kubectl get {crd['spec']['names']['plural']}` columns",
        _columns(version),
        "### `spec`",
        f"The fields of the {kind}'s `spec`: "
        f"[Experiment and Study fields](spec.md#{kind.lower()}).",
        "### `status` (written by the operator)",
        field_table(status),
    ]
    return "\n\n".join(p for p in parts if p), missing(status, f"CRD {kind}")


def crd_page(root: Path) -> tuple[str, list[str]]:
    """The page and the status fields without a description."""
    sections: list[str] = []
    found: list[str] = []
    for path in sorted((root / "charts" / "sarl-platform" / "crds").glob("*.yaml")):
        section, lacking = crd_section(path)
        sections.append(section)
        found += lacking
    intro = (
        "The custom resources the `sarl-platform` chart installs (`crds/`, generated from the "
        "pydantic models by `make generate`) and the operator reconciles. "
        "`kubectl explain experiment.spec` prints the same descriptions."
    )
    return page("Custom resources", intro, sections), found
