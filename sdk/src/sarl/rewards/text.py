"""Make policy-written text safe to encode: lone surrogates become U+FFFD.

A Python ``str`` may hold lone surrogate code points (U+D800–U+DFFF) — a policy's decoded tokens,
JSON ``"\\ud800"`` escapes — but UTF-8 cannot encode them, so JSON over HTTP (the chat clients of
``rlkd`` and ``structured_qa``), embedders and tokenizers raise ``UnicodeEncodeError`` on them.
Rewards pass text through :func:`encodable` where it leaves Python (issue 12). Offsets are kept:
one code point in, one code point out.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def encodable(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (same length, same offsets)."""
    if text.isascii():  # the common case, without a regex pass
        return text
    return _SURROGATE.sub(REPLACEMENT, text)
