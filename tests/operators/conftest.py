"""On a failed full-operator test, attach the operator's own log to the report: it is what says
why a child or a status field never appeared (the operator runs as a subprocess)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome = yield
    report = outcome.get_result()
    operator = getattr(item, "funcargs", {}).get("operator")
    if report.when == "call" and report.failed and operator is not None:
        report.sections.append(("operator log (last 4000 characters)", operator.log()))
