"""Parse a Structured Q&A response into its ask/reflect pairs, answer and structural violations.

Pure functions, no model calls. Called by ``verifiable.py`` (R_format, R_length, R_QA) and by the
reward adapter (which pairs go to the judge). The schema is Structured Q&A (Jamwal & Bhat) §3.1::

    <think>(<ask>q_i</ask><reflect>r_i</reflect>)_{i=1..N}</think><answer>a</answer>

Tags are matched exactly (lower case, no attributes or inner spaces); anything else is text.

What counts as a violation (what R_QA, §3.3, penalises) follows the paper's two categories, "an
<ask> not ending in '?'" and "an orphaned tag", and is one :class:`Violation` per offending item:

* question form, checked on every complete ``<ask>``: ``EMPTY_QUESTION`` (nothing but
  whitespace or question marks) or else ``MISSING_QUESTION_MARK`` (the stripped text does not end
  with ``?`` or the full-width ``？``). At most one per ask.
* orphaned tags: ``UNCLOSED_TAG`` (opened, never closed), ``UNOPENED_TAG`` (closed, never opened),
  ``UNPAIRED_ASK`` (a complete ask not followed by a reflect in the same think block),
  ``UNPAIRED_REFLECT`` (a complete reflect not preceded by an ask), ``MISPLACED_TAG`` (an opening
  tag where the schema has no place for it: inside ask/reflect/answer, think or answer inside
  think, ask or reflect outside think, a second think or answer, a think after the answer). A
  misplaced element is counted once, by its opening tag: its closing tag is consumed with it and
  tags inside it produce no further orphan violations (nested misplaced tags still count).
* ``EMPTY_REFLECTION``: a complete reflect with no text, which leaves its question unanswered.
  The paper does not name this case; it is counted because an empty reflect is an ask without an
  answer, i.e. an orphaned question.

Conventions where the paper is silent (tested in ``tests/sarl/rewards/structured_qa``):

* A *valid pair* (the unit R_format requires one of, R_length counts and the judge scores) is a
  complete ask followed by a complete reflect in the think block, neither containing a misplaced
  tag, with a non-empty question and a non-empty reflection. A missing ``?`` is a violation but
  leaves the pair valid: the judge's relevance axis already scores "not a real question" (-1),
  and voiding the pair as well would charge the same fault three times.
* A missing ``<think>`` or ``<answer>`` block is *not* an R_QA violation: R_format (0.1) is the
  term that charges it (§3.3). Opened-but-unclosed blocks are orphaned tags and do count.
* Text outside the pairs is reported (``stray_chars``) but not penalised: R_QA's list in §3.3
  does not include it (the "no free text" rule is an instruction to the SFT teacher, §3.2).
* Pairs inside a think block that is never closed (a generation cut at the length limit) are
  still collected, but ``has_think`` is False, so the trace earns no R_format and is not judged.
* The answer is the text of the first properly placed ``<answer>`` block (at top level, once),
  stripped. An answer block inside think is misplaced and not extracted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

_TAG = re.compile(r"<(/?)(think|ask|reflect|answer)>")
_QUESTION_MARKS = ("?", "？")
_LEAVES = frozenset({"ask", "reflect", "answer"})


class ViolationKind(StrEnum):
    """Why a part of a response breaks the schema (see the module docstring)."""

    MISSING_QUESTION_MARK = "missing_question_mark"
    EMPTY_QUESTION = "empty_question"
    EMPTY_REFLECTION = "empty_reflection"
    UNPAIRED_ASK = "unpaired_ask"
    UNPAIRED_REFLECT = "unpaired_reflect"
    UNCLOSED_TAG = "unclosed_tag"
    UNOPENED_TAG = "unopened_tag"
    MISPLACED_TAG = "misplaced_tag"


@dataclass(frozen=True, slots=True)
class Violation:
    """One structural violation: its kind, the tag involved and the character offset of that tag."""

    kind: ViolationKind
    tag: str
    offset: int

    def __str__(self) -> str:
        return f"{self.kind.value} <{self.tag}> at {self.offset}"


@dataclass(frozen=True, slots=True)
class QAPair:
    """One valid ask/reflect pair, texts stripped."""

    question: str
    reflection: str


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """A response read against the schema.

    ``pairs`` holds the valid pairs only, in order; ``answer`` is None without a complete,
    properly placed answer block; ``has_think`` is True for a complete top-level think block;
    ``violations`` are sorted by offset; ``stray_chars`` counts non-whitespace characters outside
    the schema's elements (diagnostic, not penalised).
    """

    pairs: tuple[QAPair, ...]
    answer: str | None
    has_think: bool
    violations: tuple[Violation, ...]
    stray_chars: int

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)

    @property
    def has_answer(self) -> bool:
        return self.answer is not None

    @property
    def well_formed(self) -> bool:
        """The R_format condition (§3.3): a think block, an answer block, >= 1 valid pair."""
        return self.has_think and self.has_answer and self.n_pairs >= 1


@dataclass(slots=True)
class _Leaf:
    """A complete ask or reflect element inside a think block."""

    name: str
    text: str
    offset: int
    broken: bool  # contains a misplaced tag


@dataclass(slots=True)
class _Open:
    """An element opened and not yet closed, during the scan."""

    name: str
    offset: int  # of the opening tag
    content_start: int
    ignored: bool  # misplaced itself, or inside a misplaced element: not collected when closed
    broken: bool = False  # a misplaced tag was opened directly inside it
    children: list[_Leaf] = field(default_factory=list)


class _Scan:
    """One left-to-right pass over the tags, keeping a stack of open elements."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.stack: list[_Open] = []
        # Stack positions of the open elements of each name, innermost last: a closing tag finds
        # its element in O(1) instead of a stack scan (quadratic on "<ask>"*n + "</reflect>"*n).
        self.open_at: dict[str, list[int]] = {name: [] for name in ("think", *_LEAVES)}
        self.violations: list[Violation] = []
        self.covered: list[tuple[int, int]] = []  # spans that are schema, not stray text
        self.placed_think = False
        self.placed_answer = False
        self.has_think = False
        self.answer: str | None = None
        self.think_children: list[_Leaf] = []

    def run(self) -> None:
        for match in _TAG.finditer(self.text):
            self.covered.append(match.span())
            closing, name = match.group(1) == "/", match.group(2)
            if closing:
                self._close(name, match.start())
            else:
                self._open(name, match.start(), match.end())
        for element in reversed(self.stack):
            self._unclosed(element)
            if element.name == "think" and not element.ignored:
                # Cut generation: keep the pairs for diagnostics, but the block is incomplete.
                self.think_children.extend(element.children)
        self.stack.clear()
        for positions in self.open_at.values():
            positions.clear()

    def _violation(self, kind: ViolationKind, tag: str, offset: int) -> None:
        self.violations.append(Violation(kind, tag, offset))

    def _placeable(self, name: str) -> bool:
        parent = self.stack[-1] if self.stack else None
        if parent is None:
            if name == "think":
                return not self.placed_think and not self.placed_answer
            return name == "answer" and not self.placed_answer
        return parent.name == "think" and name in ("ask", "reflect")

    def _open(self, name: str, start: int, end: int) -> None:
        parent = self.stack[-1] if self.stack else None
        inherited = parent is not None and parent.ignored
        misplaced = not self._placeable(name)
        if misplaced:
            self._violation(ViolationKind.MISPLACED_TAG, name, start)
            if parent is not None:
                parent.broken = True
        elif parent is None:
            self.placed_think |= name == "think"
            self.placed_answer |= name == "answer"
        self.open_at[name].append(len(self.stack))
        self.stack.append(_Open(name, start, end, ignored=misplaced or inherited))

    def innermost(self, name: str) -> int | None:
        """Stack position of the innermost open element named ``name``; None if none is open."""
        positions = self.open_at[name]
        return positions[-1] if positions else None

    def _pop(self) -> _Open:
        element = self.stack.pop()
        self.open_at[element.name].pop()
        return element

    def _close(self, name: str, start: int) -> None:
        # The innermost open element of that name; anything opened after it was never closed.
        depth = self.innermost(name)
        if depth is None:
            self._violation(ViolationKind.UNOPENED_TAG, name, start)
            return
        while len(self.stack) > depth + 1:
            self._unclosed(self._pop())
        element = self._pop()
        if element.ignored:
            return
        content = self.text[element.content_start : start]
        if element.name == "think":
            self.has_think = True
            self.think_children.extend(element.children)
        elif element.name == "answer":
            self.answer = content.strip()
            self.covered.append((element.content_start, start))
        else:  # ask or reflect, placed inside a think block
            self.stack[-1].children.append(
                _Leaf(element.name, content, element.offset, element.broken)
            )
            self.covered.append((element.content_start, start))

    def _unclosed(self, element: _Open) -> None:
        # A misplaced element (or one inside it) was already counted by its opening tag.
        if not element.ignored:
            self._violation(ViolationKind.UNCLOSED_TAG, element.name, element.offset)

    def stray_chars(self) -> int:
        covered = sorted(self.covered)
        count, position = 0, 0
        for start, end in covered:
            if start > position:
                count += _non_space(self.text[position:start])
            position = max(position, end)
        return count + _non_space(self.text[position:])


def _non_space(text: str) -> int:
    # str.split() splits on exactly the characters str.isspace() accepts; C speed on long text.
    return sum(map(len, text.split()))


def _question_violation(question: str) -> ViolationKind | None:
    stripped = question.strip()
    if not stripped.rstrip("".join(_QUESTION_MARKS)).strip():
        return ViolationKind.EMPTY_QUESTION
    if not stripped.endswith(_QUESTION_MARKS):
        return ViolationKind.MISSING_QUESTION_MARK
    return None


def _pair_up(children: list[_Leaf]) -> tuple[list[QAPair], list[Violation]]:
    """Valid pairs and content/pairing violations of the leaves of the think block, in order."""
    violations: list[Violation] = []
    for leaf in children:
        if leaf.broken:
            continue  # its misplaced tag is its violation; the text is not a clean question/answer
        if leaf.name == "ask":
            kind = _question_violation(leaf.text)
            if kind is not None:
                violations.append(Violation(kind, "ask", leaf.offset))
        elif not leaf.text.strip():
            violations.append(Violation(ViolationKind.EMPTY_REFLECTION, "reflect", leaf.offset))
    pairs: list[QAPair] = []
    i = 0
    while i < len(children):
        leaf = children[i]
        nxt = children[i + 1] if i + 1 < len(children) else None
        if leaf.name == "ask" and nxt is not None and nxt.name == "reflect":
            valid = (
                not leaf.broken
                and not nxt.broken
                and _question_violation(leaf.text) is not ViolationKind.EMPTY_QUESTION
                and bool(nxt.text.strip())
            )
            if valid:
                pairs.append(QAPair(leaf.text.strip(), nxt.text.strip()))
            i += 2
            continue
        kind = ViolationKind.UNPAIRED_ASK if leaf.name == "ask" else ViolationKind.UNPAIRED_REFLECT
        violations.append(Violation(kind, leaf.name, leaf.offset))
        i += 1
    return pairs, violations


def parse_response(text: str) -> ParsedResponse:
    """Read ``text`` against the Structured Q&A schema (rules in the module docstring)."""
    scan = _Scan(text)
    scan.run()
    pairs, pair_violations = _pair_up(scan.think_children)
    violations = sorted(
        [*scan.violations, *pair_violations], key=lambda v: (v.offset, v.kind.value)
    )
    return ParsedResponse(
        pairs=tuple(pairs),
        answer=scan.answer,
        has_think=scan.has_think,
        violations=tuple(violations),
        stray_chars=scan.stray_chars(),
    )
