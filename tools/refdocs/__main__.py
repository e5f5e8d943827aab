"""``python -m tools.refdocs [--check]``: write docs/reference/*.md, or (``--check``, CI and
``make check-generated``) exit 1 naming every page that differs from what the code gives.

Run from the repository root in the main environment (the CLI's plugins and the services must
be installed, as ``make setup-main`` does). Undocumented items do not stop the writing: the
tests in tests/docs fail on them, each named.
"""

from __future__ import annotations

import argparse
import sys

from tools.refdocs.pages import PAGES, REFERENCE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.refdocs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a page is out of date")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for name, build in PAGES.items():
        path = REFERENCE / name
        text, _ = build()
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(REFERENCE.parents[1])))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(
            f"out of date: {', '.join(stale)}; run `make generate` and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
