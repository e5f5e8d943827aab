"""A scripted decomposer + judge behind a real loopback chat server, for the RLKD tests.

``ScriptedModels`` answers the two kinds of requests the GSRM sends, recognised by their prompt:
decomposition requests (``[Reasoning Path]:``) get the steps scripted for that path; match
requests (``[Text A]: ... [Text B]: ...``) get ``yes`` when the two texts are equal, else ``no``,
unless a reply is queued for that pair (malformed replies, delays, errors).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.support.chat_server import ChatReply, ChatRequest, ChatServer, running_chat_server

_PAIR = re.compile(r"\[Text A\]:\n(.*?)\n\n\[Text B\]:\n(.*?)\n\nDo the two texts match", re.S)
_PATH = re.compile(r"\[Reasoning Path\]:\n(.*)$", re.S)


def decomposition(*triples: str) -> str:
    """A decomposer reply in the prompt's format, from ``"meta/question/answer"`` strings."""
    parts = []
    for i, triple in enumerate(triples, 1):
        m, q, a = triple.split("/")
        parts.append(f"Step {i}\n[Meta-reasoning]: {m}\n[Sub-problem]: {q}\n[Answer]: {a}")
    return "\n\n".join(parts)


def reference_decomposition(labels: tuple[str, str, str], *triples: str) -> str:
    """A reply in the RLKD reference code's layout (``[<label> N]: ...``, a ``[Response]:``
    header, the ``.-`` trailer of its examples and the ``</answer>`` its GSRM was trained to end
    with), e.g. ``labels=("Meat-reasoning", "Sub-problem", "Answer")``."""
    meta, question, answer = labels
    parts = []
    for i, triple in enumerate(triples, 1):
        m, q, a = triple.split("/")
        parts.append(f"[{meta} {i}]: {m}.-  \n[{question} {i}]: {q}  \n[{answer} {i}]: {a}  ")
    return "[Response]:\n" + "\n\n".join(parts) + "\n</answer>\n"


class ScriptedModels:
    def __init__(self) -> None:
        self.paths: dict[str, list[Any]] = {}  # path -> replies in turn (last one repeats)
        self.pairs: dict[tuple[str, str], list[Any]] = {}  # (A, B) -> queued replies
        self.lock = threading.Lock()

    def decompose(self, path: str, *replies: Any) -> None:
        self.paths[path] = list(replies)

    def queue(self, teacher: str, student: str, *replies: Any) -> None:
        self.pairs[(teacher, student)] = list(replies)

    def __call__(self, request: ChatRequest) -> Any:
        prompt = str(request.messages[0]["content"])
        with self.lock:
            if m := _PAIR.search(prompt):
                queued = self.pairs.get((m[1], m[2]))
                if queued:
                    return queued.pop(0)
                return "yes" if m[1] == m[2] else "no"
            if m := _PATH.search(prompt):
                replies = self.paths.get(m[1].strip())
                if not replies:
                    return ChatReply.error(400, f"no decomposition scripted for {m[1]!r}")
                return replies.pop(0) if len(replies) > 1 else replies[0]
        return ChatReply.error(400, "unexpected request")


def match_requests(server: ChatServer) -> list[tuple[str, str]]:
    pairs = []
    for r in server.requests:
        if m := _PAIR.search(str(r.messages[0]["content"])):
            pairs.append((m[1], m[2]))
    return pairs


def decompose_requests(server: ChatServer) -> Sequence[str]:
    paths = []
    for r in server.requests:
        if m := _PATH.search(str(r.messages[0]["content"])):
            paths.append(m[1].strip())
    return paths


@pytest.fixture
def models() -> ScriptedModels:
    return ScriptedModels()


@pytest.fixture
def server(models: ScriptedModels) -> Iterator[ChatServer]:
    with running_chat_server(models) as s:
        yield s
