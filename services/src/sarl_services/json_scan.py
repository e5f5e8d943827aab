"""Measure a JSON document without building it: its nesting depth, how many containers, strings
and other values it holds, and so about how much memory decoding it would take.

Called by :mod:`sarl_services.body` on every request body before ``orjson.loads``, so a body
that is small on the wire but huge once decoded (``{"requests": [{}, {}, ...]}``: 3 bytes on the
wire, 72 once a dict, plus orjson's own parse tree) or absurdly deep is refused before a single
object is built. The scan works on fixed-size chunks with C-speed bytes operations (``split``,
``count``, ``translate``) and numpy for the running depth, so its own memory is a few MiB
whatever the body holds. It does not validate the JSON: ``orjson.loads`` still does that, after
the scan let the body through; for invalid input the counts are merely estimates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_CHUNK = 256 * 1024
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_OPEN_SQUARE, _OPEN_CURLY = ord("["), ord("{")
# CPython stores a string with 1, 2 or 4 bytes a character, set by its widest character
# (PEP 393): 32 MiB of ASCII with one emoji decodes to a 128 MiB str (measured, orjson 3.13).
# In UTF-8, a lead byte 0xF0+ starts a character above U+FFFF (4 bytes each), and 0xC4-0xEF one
# in U+0100-U+FFFF (2 bytes each; 0xC2/0xC3 stay within Latin-1, 1 byte). A ``\uD800``-``\uDBFF``
# escape starts a surrogate pair (above U+FFFF); any other ``\u`` escape is counted as 2.
_FOUR_BYTES = re.compile(rb"[\xf0-\xff]|\\u[dD][89abAB]")
_TWO_BYTES = re.compile(rb"[\xc4-\xef]|\\u")
# A chunk never ends within this many bytes after a backslash: a ``\uXXXX`` escape (6 bytes)
# is seen whole, and a run of backslashes is never split (their pairing must see the run).
_ESCAPE_SPAN = 6
_CLEAN_SPAN = re.compile(rb"[^\\]{%d}" % _ESCAPE_SPAN)

# Bytes per decoded object on CPython 3.11, 64-bit (sys.getsizeof, and tracemalloc around
# orjson.loads of 200,000 copies of each shape): a container with its slot in the parent
# (empty dict 64 + 8, list 56 + 8 + 8 per item), one object entry (a dict with keys is 184+
# bytes: ~112 per entry for small dicts, key strings cached by orjson), a number or literal in
# its slot (float 24 + 8; ints up to 36), and a string's fixed part (its text is counted apart).
_CONTAINER_BYTES = 72
_ENTRY_BYTES = 112
_SCALAR_BYTES = 36
_STRING_BYTES = 56
# orjson (yyjson) parses into its own tree before building Python objects: a copy of the input
# plus 16 bytes per value, freed when loads returns (measured: 30 MiB of floats peaks at
# ~120 MiB over the input, 32 MiB of `{}` at ~970 MiB).
_TREE_BYTES_PER_VALUE = 16


class TooDeep(ValueError):
    """The document nests deeper than the limit (raised as soon as the scan gets there)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nests deeper than {limit} levels")
        self.limit = limit


@dataclass(frozen=True)
class JsonShape:
    """What a JSON document holds, counted on its bytes (upper bounds for valid JSON)."""

    size: int  # bytes of the document
    depth: int  # deepest nesting of arrays and objects
    containers: int  # arrays and objects
    entries: int  # key/value pairs of objects
    strings: int  # strings, keys included
    string_bytes: int  # bytes between the quotes, escapes included
    values: int  # every value and key: 1 + commas + colons + containers
    widest: int = 1  # bytes a character of the widest string character found: 1, 2 or 4

    @property
    def scalars(self) -> int:
        """Numbers, ``true``, ``false`` and ``null``."""
        return max(0, self.values - self.containers - self.strings)

    @property
    def decode_bytes(self) -> int:
        """About the most memory ``orjson.loads`` takes for the document: its parse tree and
        the Python objects. Text is counted at the widest character's width found anywhere in
        the document (an upper bound: the width is per string, but tracking it per string would
        take a Python step per string)."""
        tree = self.size + _TREE_BYTES_PER_VALUE * self.values
        return tree + self.object_bytes

    @property
    def object_bytes(self) -> int:
        """About the memory of the Python objects decoding builds: what stays once
        ``orjson.loads`` has returned (its parse tree is freed)."""
        return (
            _CONTAINER_BYTES * self.containers
            + _ENTRY_BYTES * self.entries
            + _SCALAR_BYTES * self.scalars
            + _STRING_BYTES * self.strings
            + self.widest * self.string_bytes
        )


def _chunk_end(raw: bytes | bytearray, start: int) -> int:
    # See _ESCAPE_SPAN: no backslash among the chunk's last bytes.
    end = start + _CHUNK
    if end >= len(raw):
        return len(raw)
    clean = _CLEAN_SPAN.search(raw, end - _ESCAPE_SPAN)
    return clean.end() if clean else len(raw)


def _widest(chunk: bytes) -> int:
    """Bytes a character of the widest character in ``chunk`` takes once decoded (1, 2, 4);
    ``chunk`` has its escaped backslashes replaced already, so each ``\\u`` is an escape."""
    if _FOUR_BYTES.search(chunk):
        return 4
    return 2 if _TWO_BYTES.search(chunk) else 1


def scan(raw: bytes | bytearray, max_depth: int) -> JsonShape:
    """Count ``raw``'s values chunk by chunk; :class:`TooDeep` once nesting passes
    ``max_depth``. Memory: a few times the chunk size, whatever ``raw`` holds."""
    in_string = False
    depth = deepest = containers = entries = strings = string_bytes = separators = 0
    widest = 1
    start = 0
    while start < len(raw):
        end = _chunk_end(raw, start)
        chunk = bytes(raw[start:end])
        start = end
        if b"\\" in chunk:
            # Inside strings, `\\` is one escaped backslash and a `\"` that remains after
            # replacing those pairs is an escaped quote; neither ends a string. (Outside
            # strings a backslash is invalid JSON, which orjson refuses later.)
            chunk = chunk.replace(b"\\\\", b"__").replace(b'\\"', b"__")
        if widest < 4 and (not chunk.isascii() or b"\\u" in chunk):
            widest = max(widest, _widest(chunk))
        parts = chunk.split(b'"')
        quotes = len(parts) - 1
        # parts alternate outside/inside a string, starting with the state carried over.
        outside = b"".join(parts[1 if in_string else 0 :: 2])
        strings += quotes // 2 if in_string else (quotes + 1) // 2
        string_bytes += len(chunk) - len(outside) - quotes
        in_string ^= quotes % 2 == 1
        containers += outside.count(b"{") + outside.count(b"[")
        entries += outside.count(b":")
        separators += outside.count(b",")
        brackets = outside.translate(None, _NOT_BRACKETS)
        if brackets:
            codes = np.frombuffer(brackets, dtype=np.uint8)
            steps = np.where((codes == _OPEN_SQUARE) | (codes == _OPEN_CURLY), 1, -1)
            running = np.cumsum(steps) + depth
            deepest = max(deepest, int(running.max()))
            if deepest > max_depth:
                raise TooDeep(max_depth)
            depth = int(running[-1])
    return JsonShape(
        size=len(raw),
        depth=deepest,
        containers=containers,
        entries=entries,
        strings=strings,
        string_bytes=string_bytes,
        values=1 + separators + entries + containers,
        widest=widest,
    )
