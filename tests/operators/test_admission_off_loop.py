"""The admission webhook checks a spec off its event loop (issue 38, finding 7).

The handler kopf calls, :func:`sarl_operator.admission.validate_images`, runs in an event loop
as kopf runs it; :func:`sarl_operator.admission.refusal` (the real check) is wrapped only to
record the thread it runs in, which is what is asserted: a 32 KB image string of ``"a:"`` took
7.7 s on the loop before, blocking every other request, probe and watch meanwhile. Asserting
the thread, not a time, keeps the test exact on a loaded machine. The hostile image itself is
refused, naming the field.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kopf
import pytest

from sarl_operator import admission
from tests.operators.test_admission import experiment


def _call(body: dict[str, Any]) -> str | None:
    """The handler's refusal message (None: admitted), called in a fresh event loop."""

    async def handle() -> str | None:
        try:
            await admission.validate_images(body=body, operation="CREATE", old=None)
        except kopf.AdmissionError as e:
            return str(e)
        return None

    return asyncio.run(handle())


def test_the_check_runs_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[threading.Thread] = []
    real = admission.refusal

    def recording(*args: Any) -> str | None:
        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(admission, "refusal", recording)
    monkeypatch.setenv(admission.ENV_ALLOWED, "ghcr.io/sarl-dev/")
    loop_thread = threading.current_thread()  # asyncio.run's loop runs in this thread
    _call(experiment("ghcr.io/sarl-dev/sarl-verl:1"))
    assert threads and threads[0] is not loop_thread


def test_a_hostile_image_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(admission.ENV_ALLOWED, "ghcr.io/sarl-dev/")
    image = "a:" * 16_000  # 32 KB
    message = _call(experiment(image))
    assert message is not None and message.startswith("spec.resources.image=")
    assert "not a valid image reference" in message and "\n" not in message
