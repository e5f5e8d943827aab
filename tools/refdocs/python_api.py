"""reference/python-api.md: the public Python API, ``sarl.__all__``, rendered by mkdocstrings.

Each exported name is resolved (``sarl``'s lazy exports import their module) to the dotted path
where it is defined, and the page holds one mkdocstrings ``:::`` block per name, so a new
export appears without anyone editing the page. An export without a docstring is missing.
"""

from __future__ import annotations

import inspect

from tools.refdocs.markdown import page


def python_api_page() -> tuple[str, list[str]]:
    """The page and the exports without a docstring."""
    import sarl

    sections: list[str] = []
    missing: list[str] = []
    for name in sorted(n for n in sarl.__all__ if not n.startswith("__")):
        obj = getattr(sarl, name)
        if not inspect.getdoc(obj):
            missing.append(f"python: sarl.{name}")
        sections.append(f"## `sarl.{name}`\n\n::: {obj.__module__}.{obj.__qualname__}")
    intro = (
        "What `import sarl` exports (`sarl.__all__`), from the docstrings. `sarl.__version__` "
        "is the installed version. Everything else is internal and may change."
    )
    return page("Python API", intro, sections), missing
