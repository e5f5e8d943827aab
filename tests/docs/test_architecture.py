"""The layering docs/architecture.md describes holds (issue 41): every product package imports
only the sdk (``sarl``), and the sdk imports none of them (a plugin such as ``sarl serve`` is
found through an entry point, never imported by name). Read from the source by the same code
that draws docs/reference/imports.md, so the page and this test cannot disagree."""

from __future__ import annotations

from pathlib import Path

from tools.refdocs.imports_ref import PRODUCTS, product_edges

ROOT = Path(__file__).resolve().parents[2]


def test_dependencies_point_into_the_sdk() -> None:
    edges = product_edges(ROOT)
    assert edges["sarl"] == set(), f"the sdk imports {sorted(edges['sarl'])}"
    for name in PRODUCTS:
        assert edges[name] <= {"sarl"}, f"{name} imports {sorted(edges[name] - {'sarl'})}"


def test_an_import_of_a_product_by_the_sdk_is_found(tmp_path: Path) -> None:
    for rel in PRODUCTS.values():
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / PRODUCTS["sarl"] / "bad.py").write_text(
        "def f():\n    from sarl_services import server\n", encoding="utf-8"
    )
    (tmp_path / PRODUCTS["sarl_jobs"] / "ok.py").write_text("import sarl.spec\n", encoding="utf-8")
    edges = product_edges(tmp_path)
    assert edges["sarl"] == {"sarl_services"}
    assert edges["sarl_jobs"] == {"sarl"}
