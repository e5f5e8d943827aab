"""The (meta-reasoning, sub-problem, answer) step of RLKD and a parser for decomposer replies.

RLKD eq. 1 writes a reasoning path as ``S = [(M_1, Q_1 & A_1), ..., (M_n, Q_n & A_n)]``. The
decomposer (``sarl.rewards.rlkd.gsrm``) is asked for one tagged line per field, but models drift
in format, so :func:`parse_steps` accepts, in this order of preference:

* JSON: a list of objects (or ``{"steps": [...]}``), bare or in a fenced code block, with keys
  such as ``meta_reasoning``/``meta``, ``sub_problem``/``question``, ``answer``;
* labelled text: a field label at the start of a line (after indentation, ``>``, a list marker
  ``-``/``*``/``1.``/``1)``, a heading ``#``, an optional ``Step 3 -`` prefix, and markdown
  emphasis), followed by a colon: ``Meta-reasoning: ...``, ``**Sub-problem 2:** ...``,
  ``- **Answer**: ...``, ``[Meta-reasoning]: ...``; and bracketed labels anywhere in a line
  (``[Sub-problem]: ... [Answer]: ...``, the paper's own layout). Labels are case-insensitive
  and tolerate spelling variants (``Meta reasoning``, ``Metareasoning``, ``Sub-question``,
  ``Subproblem``, ``Question``) and an index (``Sub-problem [1]``, ``[Answer 2]``).
* The label sets of the RLKD reference code (xsc1234/RLKD), which a decomposer trained with its
  recipe writes: ``[Meat-reasoning N]``/``[Sub-problem N]``/``[Answer N]`` (the in-context
  examples of ``make_data/Prompt.py`` and ``open-r1-main/src/open_r1/Prompt.py``, typo included;
  GPT-4o's replies to them are the GSRM's training targets, ``make_training_dataset_GSRM.py``)
  and ``[sub-think N]``/``[Query N]``/``[Answer N]`` (the system prompt of the same training
  data, and the only labels the reference's own parser ``rewards.py:extract_sections`` reads).
  ``meat-reasoning`` and ``sub-think`` are meta-reasoning labels, ``query`` a sub-problem one.

Steps are assembled in order: a field label that is already filled in the current step (or a
meta-reasoning label once the step has any field) starts a new step. A field that never
appears stays ``""``; such a step is kept (dropping it would shift the alignment Algorithm 1
relies on) and an empty field never matches (``algorithm``). Bare ``Step 3`` header lines and
``---`` rules are removed from field text, and so are the reference layout's trailers (a final
``</answer>``, a ``-`` after a sentence's last punctuation). A leading ``<think>...</think>``
block (a reasoning decomposer) is ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

FieldName = Literal["meta", "question", "answer"]
FIELDS: tuple[FieldName, ...] = ("meta", "question", "answer")


@dataclass(frozen=True, slots=True)
class Step:
    """One meta-reasoning-solving step ``(M, Q & A)`` (RLKD eq. 1)."""

    meta: str
    question: str
    answer: str

    def field(self, name: FieldName) -> str:
        return {"meta": self.meta, "question": self.question, "answer": self.answer}[name]


_THINK = re.compile(r"^\s*<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.S)
# Every run below is possessive (``*+``): each is followed by a character it cannot match, so
# giving characters back never helps a match, and without it adjacent optional runs (emphasis,
# spaces) split a long run of '*' in O(n^2)-O(n^3) ways before failing (issue 12).
_LABEL = (
    r"(?P<label>me(?:ta|at)[ \t_-]*+reasoning|sub[ \t_-]*+(?:problem|question|think)"
    r"|query|question|answer)"
)
_INDEX = r"(?:[ \t]*+(?:\[\d++\]|\(\d++\)|\d++))?"
_EMPH = r"[*_`]*+"
_SPACE = r"[ \t]*+"
# A label at the start of a line, followed by a colon (inside or after emphasis/bracket).
_LINE_LABEL = re.compile(
    rf"^[ \t>]*+(?:(?:[-*+•]|\d++[.)]|\#{{1,6}}+)[ \t]++)?"
    rf"(?:{_EMPH}step{_SPACE}\d++{_EMPH}{_SPACE}[-–—:.)]?{_SPACE})?"
    rf"{_EMPH}\[?{_EMPH}{_LABEL}{_INDEX}{_EMPH}\]?{_EMPH}{_SPACE}[:：]{_EMPH}{_SPACE}",
    re.I | re.M,
)
# A bracketed label anywhere: "[Sub-problem]: ...", "[Answer] - ...".
_INLINE_LABEL = re.compile(
    rf"\[{_EMPH}{_LABEL}{_INDEX}{_EMPH}\]{_EMPH}{_SPACE}[:：\-–—]?{_SPACE}", re.I
)
_STEP_HEADER = re.compile(
    rf"^{_SPACE}(?:\#{{1,6}}+{_SPACE})?{_EMPH}step{_SPACE}\d++{_EMPH}{_SPACE}[:.]?{_EMPH}{_SPACE}$"
    r"|^[ \t]*+-{3,}+[ \t]*+$",
    re.I | re.M,
)

# Normalised JSON keys (lower case, letters only) -> field.
_JSON_KEYS: dict[str, FieldName] = {
    "meta": "meta",
    "metareasoning": "meta",
    "meatreasoning": "meta",
    "subthink": "meta",
    "m": "meta",
    "subproblem": "question",
    "subquestion": "question",
    "question": "question",
    "query": "question",
    "problem": "question",
    "q": "question",
    "answer": "answer",
    "subanswer": "answer",
    "a": "answer",
}


def parse_steps(text: str) -> list[Step]:
    """The steps in a decomposer reply (formats in the module docstring); ``[]`` if none."""
    text = _THINK.sub("", text, count=1)
    steps = _parse_json(text)
    return steps if steps else _parse_labelled(text)


def _parse_json(text: str) -> list[Step]:
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        candidates.append(stripped)
    for candidate in candidates:
        try:
            payload = json.loads(candidate)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python goes
            continue
        steps = steps_from_json(payload)
        if steps:
            return steps
    return []


def steps_from_json(payload: object) -> list[Step]:
    """Steps from decoded JSON: a list of step objects or ``{"steps": [...]}`` (keys as in the
    module docstring); items that are not objects or have no field are skipped."""
    if isinstance(payload, Mapping):
        payload = payload.get("steps")
    if not isinstance(payload, Sequence) or isinstance(payload, str):
        return []
    steps = []
    for item in payload:
        if not isinstance(item, Mapping):
            continue
        fields: dict[FieldName, str] = {}
        for key, value in item.items():
            name = _JSON_KEYS.get(re.sub(r"[^a-z]", "", str(key).lower()))
            if name is not None and name not in fields and value is not None:
                fields[name] = str(value).strip()
        if any(fields.values()):
            steps.append(_step(fields))
    return steps


def _step(fields: Mapping[FieldName, str]) -> Step:
    return Step(fields.get("meta", ""), fields.get("question", ""), fields.get("answer", ""))


def _field_of(label: str) -> FieldName:
    key = re.sub(r"[^a-z]", "", label.lower())
    if key.startswith(("meta", "meat")) or key == "subthink":
        return "meta"
    return "answer" if key == "answer" else "question"


def _labels(text: str) -> list[tuple[int, int, FieldName]]:
    """Non-overlapping ``(start, end, field)`` label spans in text order."""
    found = sorted(
        [(m.start(), m.end(), _field_of(m["label"])) for m in _LINE_LABEL.finditer(text)]
        + [(m.start(), m.end(), _field_of(m["label"])) for m in _INLINE_LABEL.finditer(text)]
    )
    spans: list[tuple[int, int, FieldName]] = []
    for start, end, name in found:
        if spans and start < spans[-1][1]:
            continue  # the same label seen by both patterns (or nested): keep the first
        spans.append((start, end, name))
    return spans


def _clean(value: str) -> str:
    value = _STEP_HEADER.sub("", value).strip().strip("*_`").strip()
    # Trailers of the reference layout: the GSRM's training targets end in "</answer>", and its
    # examples end a meta-reasoning with ".-".
    value = value.removesuffix("</answer>").rstrip()
    if value.endswith("-") and value[-2:-1] in (".", "!", "?"):
        value = value[:-1]
    return value


def _parse_labelled(text: str) -> list[Step]:
    spans = _labels(text)
    steps: list[Step] = []
    current: dict[FieldName, str] = {}

    def flush() -> None:
        if any(current.values()):
            steps.append(_step(current))
        current.clear()

    for i, (_, end, name) in enumerate(spans):
        stop = spans[i + 1][0] if i + 1 < len(spans) else len(text)
        if name in current or (name == "meta" and current):
            flush()
        current[name] = _clean(text[end:stop])
    flush()
    return steps
