"""Kubernetes quantities to bytes, and the plan's short figures."""

from __future__ import annotations

import pytest

from sarl.plan.units import gi_quantity, gib, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20Gi", 20 * 2**30),
        ("1.5Ti", int(1.5 * 2**40)),
        ("4T", 4 * 10**12),
        ("512", 512),
        ("100m", 1),
        ("64Mi", 64 * 2**20),
    ],
)
def test_parse_quantity(text: str, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["", "20 Gi", "20GB", "-1Gi", "Gi", "1e3"])
def test_bad_quantities_name_the_value(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(bad)


def test_figures() -> None:
    assert gib(58.3 * 2**30) == "58.3 GiB"
    assert gib(3.75 * 2**40) == "3.75 TiB"
    assert gib(1.3 * 2**20) == "1.3 MiB"
    assert gi_quantity(194.8 * 2**30) == "195Gi" and gi_quantity(2**30) == "1Gi"
