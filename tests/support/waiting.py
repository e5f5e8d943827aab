"""Poll a condition until it holds or a deadline passes: how a test waits for another thread or
process to get somewhere, instead of sleeping a fixed time that a loaded machine can outlast.

Used by tests that coordinate with a command under test (tests/sarl/cluster, tests/services,
tests/jobs, tests/sarl/embedding). The deadline bounds a hang; it is not a timing assertion.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object], timeout_s: float = 60.0, poll_s: float = 0.02
) -> bool:
    """Whether ``condition()`` became truthy within ``timeout_s`` (checked every ``poll_s``).

    Returns instead of raising, so a helper thread can go on (and let the test's own assertion
    fail) while a test asserts on the result.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True
