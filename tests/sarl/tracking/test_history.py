"""``metric_histories``, the one reader of MLflow metric histories (``sarl compare`` and the
Study report): the last value per step by timestamp, values ``keep`` refuses dropped, keys in
the order asked, a failing read one ``TrackingError`` line."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from sarl.tracking.history import metric_histories
from sarl.tracking.store import TrackingError


@dataclass(frozen=True)
class Point:
    step: int
    value: float
    timestamp: int


@dataclass
class FakeClient:
    """``get_metric_history`` of one run, from a dict; ``None`` for a key: the read fails."""

    histories: dict[str, list[Point] | None]
    asked: list[str] = field(default_factory=list)

    def get_metric_history(self, run_id: str, key: str) -> list[Point]:
        self.asked.append(key)
        points = self.histories[key]
        if points is None:
            raise ConnectionError("connection refused")
        return points


RUN: Any = SimpleNamespace(info=SimpleNamespace(run_id="r1"))


def _read(histories: dict[str, list[Point] | None], **kwargs: Any) -> dict[str, Any]:
    client: Any = FakeClient(histories)
    return metric_histories(client, "http://mlflow", RUN, list(histories), **kwargs)


def test_last_value_per_step_sorted_by_step() -> None:
    # step 1 logged twice (a resumed run): the later timestamp wins, whatever the listing order
    points = [Point(2, 0.2, 20), Point(1, 0.9, 30), Point(1, 0.1, 10), Point(0, 0.0, 5)]
    assert _read({"kl": points}) == {"kl": [(0, 0.0), (1, 0.9), (2, 0.2)]}


def test_a_timestamp_tie_keeps_the_point_listed_last() -> None:
    assert _read({"kl": [Point(1, 0.1, 10), Point(1, 0.2, 10)]}) == {"kl": [(1, 0.2)]}


@pytest.mark.parametrize(
    ("keep", "expected"),
    [
        (None, [(0, 1.0)]),  # default: finite values only
        (lambda v: not math.isnan(v), [(0, 1.0), (2, math.inf)]),
    ],
)
def test_values_keep_refuses_are_dropped(keep: Any, expected: list[tuple[int, float]]) -> None:
    points = [Point(0, 1.0, 1), Point(1, math.nan, 2), Point(2, math.inf, 3)]
    kwargs = {} if keep is None else {"keep": keep}
    assert _read({"reward/mean": points}, **kwargs) == {"reward/mean": expected}


def test_keys_in_the_order_asked_and_a_failed_read_is_one_line() -> None:
    assert list(_read({"b": [], "a": []})) == ["b", "a"]
    with pytest.raises(TrackingError, match=r"reading kl of run r1 at http://mlflow failed"):
        _read({"kl": None})
