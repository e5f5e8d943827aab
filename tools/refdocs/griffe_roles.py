"""A griffe extension for the Python API page (mkdocs.yml, mkdocstrings' ``extensions``):
Sphinx roles in sarl's docstrings (``:class:`~sarl.cluster.ClusterClient```, ``:func:`x```,
``:data:``, ``:meth:``...) become plain code spans, since mkdocstrings renders docstrings as
Markdown and would print the role's name (``:class:~sarl...``) as text.

``~`` keeps only the last dotted part, as Sphinx shows it.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|exc|obj|const):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """``:class:`~a.b.C``` -> ```C```, ``:func:`a.f``` -> ```a.f```."""

    def code(match: re.Match[str]) -> str:
        target = match[2]
        return f"`{target.rsplit('.', 1)[-1] if match[1] else target}`"

    return _ROLE.sub(code, text)


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite each object's docstring once it is loaded."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
