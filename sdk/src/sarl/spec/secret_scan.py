"""Where URL userinfo and ``name=value`` assignments sit in a string, found in linear time.

Called by :mod:`sarl.spec.secrets` (rules 1 and 4 of its docstring), which decides what is a
secret; this module only finds the places. Each scan is linear in the text: a string such as
``"a:" * n`` in a spec made the former single-regex forms quadratic (93 s for a 66 KB spec in
``sarl validate``, issue 38), because every start position scanned on to the end of the text.
Here every pattern starts only where the previous character cannot continue it (so the starts'
scans are disjoint), and the part that runs to the end of a word (a value, a password) is
looked up in runs computed once, not rescanned per start.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import Final

# A scheme is ``ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`` (RFC 3986 3.1). The pattern starts
# at the beginning of a run of scheme characters and skips its non-letters, so it is tried once
# per run (``\b`` started it at every letter after a '.', '-' or '+': quadratic on ``"a." * n``).
_USERINFO: Final = re.compile(
    r"(?<![A-Za-z0-9+.\-])[0-9+.\-]*(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s]+@"
)
# A network-path reference ``//user[:password]@host``; its scan stops at the next '/'.
_NETPATH: Final = re.compile(r"(?<![A-Za-z0-9+.\-:/])//[^/?#\s]+@(?=[A-Za-z0-9\[])")
# ``user:`` of a scheme-less ``user:password@host[:port]``; the password runs to the last '@'
# (before a host character) of the same segment, found by :func:`_last_host_at`.
_BARE_USER: Final = re.compile(r"(?<![A-Za-z0-9._~%+:/@\-])[A-Za-z0-9._~%+\-]+:")
_SEGMENT: Final = re.compile(r"[^/?#\s]+")
_HOST_START: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789[")

# ``--name=`` / ``--name `` (a flag) and ``name=`` / ``Name: `` (an assignment): only the lead;
# the value is the run of value characters after it (:class:`_Runs`).
_FLAG_LEAD: Final = re.compile(r"(?<![\w\-])--?(?P<name>[A-Za-z][\w.\-]*)(?:=|\s+)")
# A name may be in any script (``mot_de_passe``, ``пароль``) and percent-encoded (``api%5Fkey``).
_ASSIGN_LEAD: Final = re.compile(
    r"(?<![\w.\-%])(?P<name>(?:[^\W\d_]|%[0-9A-Fa-f]{2})[\w\-%]*)\s*[=:]\s*"
)
# ``Authorization: Bearer <v>``: the scheme word belongs to the value.
_AUTH_SCHEME: Final = re.compile(r"(?:basic|bearer|token|digest)\s+", re.IGNORECASE)
_FLAG_VALUE_CHARS: Final = r"[^\s'\"]+"
_ASSIGN_VALUE_CHARS: Final = r"[^\s,;'\"&]+"


def userinfo_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, kept prefix) of each URL userinfo in ``text``: ``scheme://user:pw@``,
    ``//user:pw@`` and ``user:pw@host``; ``text[start:end]`` is replaced by ``prefix + '***@'``
    when redacting. Spans do not overlap and come in order of their start."""
    spans: list[tuple[int, int, str]] = []
    for m in _USERINFO.finditer(text):
        spans.append((m.start("scheme"), m.end(), m["scheme"]))
    for m in _NETPATH.finditer(text):
        spans.append((m.start(), m.end(), "//"))
    for seg in _SEGMENT.finditer(text):
        at = _last_host_at(text, seg.start(), seg.end())
        user = _BARE_USER.search(text, seg.start(), at) if at > 0 else None
        if user is not None:
            spans.append((user.start(), at + 1, ""))
    yield from _disjoint(sorted(spans))


def _last_host_at(text: str, start: int, end: int) -> int:
    """Index of the last '@' in ``text[start:end]`` followed by a host character, or -1."""
    at = text.rfind("@", start, end)
    while at >= 0 and not (at + 1 < len(text) and text[at + 1] in _HOST_START):
        at = text.rfind("@", start, at)
    return at


def _disjoint(spans: list[tuple[int, int, str]]) -> Iterator[tuple[int, int, str]]:
    """The spans (sorted by start) without those overlapping an earlier one."""
    reached = -1
    for start, end, prefix in spans:
        if start >= reached:
            reached = end
            yield start, end, prefix


class _Runs:
    """The maximal runs of ``chars`` in a text, computed once, so that the run holding any
    position is found without rescanning (bisect over the runs' starts)."""

    def __init__(self, text: str, chars: str) -> None:
        found = [(m.start(), m.end()) for m in re.finditer(chars, text)]
        self._starts = [s for s, _ in found]
        self._ends = [e for _, e in found]

    def end_from(self, pos: int) -> int:
        """End of the run holding ``pos``; ``pos`` itself when no run holds it."""
        i = bisect.bisect_right(self._starts, pos) - 1
        return self._ends[i] if i >= 0 and self._ends[i] > pos else pos


def assignments(text: str) -> Iterator[tuple[str, int, int]]:
    """(name, value start, value end) of every ``--flag=value``, ``--flag value``,
    ``name=value`` and ``Name: value`` in ``text``, the value non-empty. A flag's value runs to
    whitespace or a quote; an assignment's also to ``,;&`` and may start with an HTTP
    authorization scheme (``Authorization: Bearer <v>``). Values may overlap
    (``https://h/cb?access_token=v`` holds ``https: //h/cb?access_token=v`` and
    ``access_token=v``)."""
    leads = ((_FLAG_LEAD, _FLAG_VALUE_CHARS, False), (_ASSIGN_LEAD, _ASSIGN_VALUE_CHARS, True))
    for lead, chars, schemes in leads:
        runs: _Runs | None = None
        for m in lead.finditer(text):
            runs = runs or _Runs(text, chars)  # only texts holding a lead pay for the runs
            start = m.end()
            scheme = _AUTH_SCHEME.match(text, start) if schemes else None
            if scheme is not None and runs.end_from(scheme.end()) > scheme.end():
                yield m["name"], start, runs.end_from(scheme.end())
            elif runs.end_from(start) > start:
                yield m["name"], start, runs.end_from(start)
