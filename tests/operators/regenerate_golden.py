"""Rewrite (or ``--check``) the golden child objects of the operator in ``tests/operators/golden/``.

The only way these golden files change: run ``python tests/operators/regenerate_golden.py`` after
changing a builder, review the diff, commit it. ``--check`` exits 1 when a golden file is stale.
``tests/operators/test_builders.py`` (Experiments) and ``test_study_builders.py`` (Studies,
``study_cases.py``) compare them byte for byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.operators.cases import CASES, golden_path, golden_text
from tests.operators.study_cases import golden_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a golden file is stale")
    args = parser.parse_args(argv)
    stale: list[Path] = []
    expected = {golden_path(case): golden_text(case) for case in CASES} | golden_files()
    for path, content in expected.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == content:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
    verb = "stale" if args.check else "rewrote"
    for path in stale:
        print(f"{verb}: {path}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
