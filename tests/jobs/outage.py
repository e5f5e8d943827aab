"""Helpers of the verl tracking tests: a real MLflow server that can be SIGKILLed and started again
on the same port and database, a count of the tracker's failed sends, and spool contents.

Also used by ``tests/sarl/runner/test_tracking_outage.py`` and the TRL job's outage test; it lives
here, in a module that needs neither TRL nor verl, so both environments can import it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.mlflow_server import free_port, live_group_members, running_mlflow_server

# Small retry budgets: every failed send is one warning line ("not answering").
OUTAGE_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
    "SARL_TRACKING_RETRY_MAX_S": "1",
    "SARL_TRACKING_REPORT_EVERY_S": "0",
    "SARL_TRACKING_FINISH_WAIT_S": "300",
}
#: verl 0.9.1's MLflow logger gives up on a step's metrics after this many tries
#: (``MLFLOW_MAX_ATTEMPTS`` in ``verl/utils/tracking.py``, no pause between them).
VERL_ATTEMPTS = 3


class Server:
    """A real ``mlflow server`` that can be SIGKILLed and started again on the same port and DB."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._stack: contextlib.ExitStack | None = None
        self._pid = 0

    def start(self) -> None:
        self._stack = contextlib.ExitStack()
        server = self._stack.enter_context(running_mlflow_server(self.root, port=self.port))
        self._pid = server.pid

    def kill(self) -> None:
        """SIGKILL the whole server (no graceful shutdown), and wait until it is gone."""
        os.killpg(self._pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while live_group_members(self._pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


class FailedSends(logging.Handler):
    """Counts the tracker's "not answering" warnings (one per failed send with OUTAGE_ENV)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.recovered = False

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.count += "not answering" in message
        self.recovered |= "answers again" in message

    def __enter__(self) -> FailedSends:
        logging.getLogger("sarl.tracking").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("sarl.tracking").removeHandler(self)


def spool_steps(folder: Path) -> list[int]:
    """The steps of the unacknowledged metric records in a spool folder no run holds (a
    checkpoint's tail, an abandoned spool)."""
    acked = int((folder / "acked").read_text()) if (folder / "acked").exists() else 0
    steps = []
    for line in (folder / "records.jsonl").read_text().splitlines():
        doc = json.loads(line)
        if doc["pos"] > acked and doc["kind"] == "metrics":
            steps.append(int(doc["step"]))
    return steps


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = 600) -> None:
    """Poll ``done()`` until true; generous: a busy machine."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.1)
