"""Generators of the documentation site's reference pages (docs/reference/*.md, issue 41).

Run by ``make generate`` (``python -m tools.refdocs``) and ``make check-generated``
(``--check``); tests/docs checks the pages equal this output and that nothing they document lacks
a description. It lives outside the packages so that neither the sdk's reward core nor the
services depend on documentation code; it imports them, never the other way round.
"""
