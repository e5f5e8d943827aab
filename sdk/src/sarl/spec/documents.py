"""Read and parse spec documents that may be hostile: size, encoding, depth and alias limits.

Called by :mod:`sarl.spec.loader` (so by ``sarl validate``, ``sarl run``, ``sarl study run``,
``sarl submit``, :class:`sarl.Client`, the job entrypoints and the operator) and by
``sarl reward score --settings``. A spec is a few kilobytes a person wrote; each limit refuses
what no person writes before it costs more than the limit allows, with a one-line
:class:`DocumentError` naming the file, where, and the fix:

* :data:`MAX_SPEC_BYTES` (1 MiB): a file is read no further (a Kubernetes object is capped at
  about 1.5 MiB by etcd, so a larger spec could not be submitted anyway);
* UTF-8 only, an invalid byte named by its offset and line;
* :data:`MAX_DEPTH` levels of nesting: PyYAML's composer recurses once per level, so a 5,000-deep
  list is a ``RecursionError`` without it;
* :data:`MAX_NODES` nodes, every alias counted as the nodes it stands for: a 1 KB anchor bomb
  ("billion laughs") composes to a few dozen nodes that expand to 10^9 when anything walks them
  (validation, redaction), so the expanded size is counted while composing. An alias inside the
  node it names (a cycle) is refused too.
* a key written twice in one mapping, an integer outside 64 bits and a float that is not
  finite (:mod:`sarl.spec.scalars`), named by field path and line, before anything is
  constructed; a document given as Python objects gets the same number checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import Node
from yaml.resolver import Resolver

from sarl.spec.scalars import Loc, node_problem, value_problem

MAX_SPEC_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 10_000

try:  # libyaml's parser makes events in C; the composer stays ours (the limits live there)
    from yaml._yaml import CParser as _Parser

    _C = True
except ImportError:  # PyYAML built without libyaml: the pure-Python reader and parser
    _C = False


class DocumentError(ValueError):
    """A spec document was refused before validation; the message is one line naming it."""


class DocumentValueError(DocumentError):
    """Valid YAML refused for what it holds (a duplicate key, a huge integer, a non-finite
    float): quoting would not fix it."""


class _LimitedLoader(Composer, SafeConstructor, Resolver):
    """PyYAML's safe loader whose composer (``yaml/composer.py``, PyYAML 6.0) counts depth and
    expanded nodes. Composer comes before the parser in the MRO so that its
    ``get_single_node``/``compose_node`` replace libyaml's C composer; the parser only supplies
    events (``check_event``/``peek_event``/``get_event``)."""

    def __init__(self, text: str, label: str) -> None:
        self._init_parser(text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.label = label
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[str, int] = {}  # anchor -> nodes it expands to, once composed

    def _init_parser(self, text: str) -> None:
        raise NotImplementedError  # chosen below, by whether libyaml is present

    if TYPE_CHECKING:  # supplied by the parser class mixed in below

        def peek_event(self) -> Any: ...
        def check_event(self, *choices: Any) -> bool: ...

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        if self.check_event(AliasEvent):
            size = self._sizes.get(event.anchor) if event.anchor in self.anchors else 1
            if size is None:  # the anchor's node is still being composed: a cycle
                self._refuse(event, f"alias *{event.anchor} is inside the node it names")
            self._count(event, size or 1, alias=True)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            self._refuse(event, f"nested deeper than {MAX_DEPTH} levels; flatten the document")
        before = self._nodes
        self._count(event, 1, alias=False)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._sizes[event.anchor] = self._nodes - before
        return node

    def _count(self, event: Any, size: int, alias: bool) -> None:
        self._nodes += size
        if self._nodes <= MAX_NODES:
            return
        what = (
            f"aliases expand the document past {MAX_NODES:,} nodes (an anchor bomb?); "
            "write the values out instead of nesting aliases"
            if alias
            else f"more than {MAX_NODES:,} YAML nodes; a spec is a few hundred"
        )
        self._refuse(event, what)

    def _refuse(self, event: Any, problem: str) -> None:
        raise DocumentError(f"{self.label}: line {event.start_mark.line + 1}: {problem}")


if _C:

    class _Loader(_LimitedLoader, _Parser):
        def _init_parser(self, text: str) -> None:
            _Parser.__init__(self, text)

else:
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(_LimitedLoader, Reader, Scanner, Parser):  # type: ignore[no-redef]
        def _init_parser(self, text: str) -> None:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)


def read_spec_file(path: Path) -> str:
    """The file's text: at most :data:`MAX_SPEC_BYTES` bytes read, decoded as UTF-8."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
            size = path.stat().st_size if len(data) > MAX_SPEC_BYTES else len(data)
    except OSError as e:
        raise DocumentError(f"{path}: cannot read: {e.strerror or e}") from e
    if len(data) > MAX_SPEC_BYTES:
        raise DocumentError(
            f"{path}: {max(size, len(data)):,} bytes, over the {MAX_SPEC_BYTES:,}-byte (1 MiB) "
            "limit for spec files; a spec is a few kilobytes (move data out to a dataset)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DocumentError(
            f"{path}: not UTF-8: byte 0x{data[e.start]:02x} at byte offset {e.start} "
            f"(line {line}); save the file as UTF-8"
        ) from e


def parse_yaml(text: str, label: str) -> Any:
    """The YAML (or JSON) document in ``text``, within the limits; ``label`` names it in errors."""
    if len(text) > MAX_SPEC_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise DocumentError(
            f"{label}: over the {MAX_SPEC_BYTES:,}-byte (1 MiB) limit for spec documents"
        )
    loader = _Loader(text, label)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        found = node_problem(node, loader.construct_object)
        if found is not None:
            loc, line, problem = found
            raise DocumentValueError(f"{label}: line {line}: {_where(loc)}{problem}")
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        parts = [str(p) for p in (getattr(e, "context", None), getattr(e, "problem", None)) if p]
        problem = " ".join((", ".join(parts) or str(e)).split())
        raise DocumentError(f"{label}:{where} invalid YAML: {problem}") from e
    finally:
        loader.dispose()


def check_tree(data: Any, label: str) -> None:
    """Refuse a document given as Python objects (the operator, :class:`sarl.Client`) past the
    same depth and node limits; shared or cyclic containers count each time they are reached."""
    stack: list[tuple[Any, Loc]] = [(data, ())]
    nodes = 0
    while stack:
        value, loc = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise DocumentError(f"{label or 'document'}: more than {MAX_NODES:,} values")
        if len(loc) >= MAX_DEPTH:
            raise DocumentError(f"{label or 'document'}: nested deeper than {MAX_DEPTH} levels")
        problem = value_problem(value)
        if problem is not None:
            raise DocumentValueError(f"{label or 'document'}: {_where(loc)}{problem}")
        if isinstance(value, Mapping):
            stack.extend((v, (*loc, str(k))) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((v, (*loc, i)) for i, v in enumerate(value))


def _where(loc: Loc) -> str:
    """``spec.reward[0].weight: `` for a field path (nothing for the document itself)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return f"{out}: " if out else ""
