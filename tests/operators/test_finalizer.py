"""The finalizer operators/README.md and charts/README.md tell users to remove (once the operator
is uninstalled) is the one the operator puts on Experiments and Studies, and the documented
patch removes exactly it.

Contract with kopf, read from the kopf 1.45.2 wheel this repository installs:
``kopf/on.py`` registers every ``@kopf.timer`` with ``requires_finalizer=True`` (so kopf adds its
finalizer to each object a timer watches), and ``kopf/_cogs/configs/configuration.py``
(``PersistenceSettings.finalizer``) names it ``kopf.zalando.org/KopfFinalizerMarker`` unless a
startup handler changes ``settings.persistence.finalizer``. The test runs the operator's own
startup handlers on fresh settings and reads the name from there.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

kopf = pytest.importorskip("kopf")
jsonpatch = pytest.importorskip("jsonpatch")

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "operators" / "README.md", REPO / "charts" / "README.md")


def _operator_finalizer(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("SARL_WEBHOOK_PORT", raising=False)  # the idle webhook server
    monkeypatch.delenv("SARL_ALLOWED_IMAGE_REGISTRIES", raising=False)
    import sarl_operator.handlers  # noqa: F401  (registers every handler, Studies' included)

    registry = kopf.get_default_registry()
    # Resources with a handler that makes kopf add its finalizer (today: the status timers).
    finalized = {
        h.selector.any_name for h in registry._spawning.get_all_handlers() if h.requires_finalizer
    }
    assert {"experiments", "studies"} <= finalized, finalized
    settings = kopf.OperatorSettings()
    for handler in registry._activities.get_all_handlers():
        if handler.activity == "startup":  # kopf's Activity is a StrEnum
            handler.fn(settings=settings, logger=logging.getLogger("test"), memo=None)
    return str(settings.persistence.finalizer)


def _documented_patches() -> list[list[dict[str, Any]]]:
    text = (REPO / "operators" / "README.md").read_text(encoding="utf-8")
    patches = []
    for command in re.findall(r"kubectl patch [^\n]*\\\n\s*'[^']*'", text):
        words = shlex.split(command.replace("\\\n", " "))
        patches.append(json.loads(words[words.index("-p") + 1]))
    return patches


def test_documented_finalizer_is_the_operators(monkeypatch: pytest.MonkeyPatch) -> None:
    finalizer = _operator_finalizer(monkeypatch)
    assert finalizer == "kopf.zalando.org/KopfFinalizerMarker"
    for doc in DOCS:
        named = set(re.findall(r"[a-z0-9.-]+\.[a-z]+/[A-Za-z]*Finalizer[A-Za-z]*", doc.read_text()))
        assert named == {finalizer}, f"{doc.relative_to(REPO)} names {named}"


def test_documented_patch_removes_only_kopfs_finalizer(monkeypatch: pytest.MonkeyPatch) -> None:
    finalizer = _operator_finalizer(monkeypatch)
    (patch,) = _documented_patches()
    stuck = {"metadata": {"name": "e", "finalizers": [finalizer], "deletionTimestamp": "now"}}
    assert "finalizers" not in jsonpatch.apply_patch(stuck, patch)["metadata"]
    shared = {"metadata": {"name": "e", "finalizers": [finalizer, "example.com/keep"]}}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(shared, patch)  # someone else's finalizer: the patch refuses
