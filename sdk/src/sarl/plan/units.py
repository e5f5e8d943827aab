"""Kubernetes quantities to bytes and bytes to short human figures, for the resource plan.

Called by :mod:`sarl.plan` (spec quantities such as ``scratch_size: 256Gi``, the store's
capacity) and by its table. Follows apimachinery's ``resource.Quantity`` suffixes: binary
(Ki..Ei), decimal (k, M..E) and the milli suffix ``m``.
"""

from __future__ import annotations

import math
import re
from typing import Final

_SUFFIXES: Final = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY: Final = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def parse_quantity(value: str) -> int:
    """Bytes (rounded up) of a Kubernetes quantity; ValueError naming the value otherwise."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity such as '20Gi' or '4Ti'")
    number, suffix = match.groups()
    return math.ceil(float(number) * _SUFFIXES[suffix or ""])


def gib(n: float) -> str:
    """Bytes as GiB with one decimal ("58.3 GiB"), TiB from 1024 GiB on, MiB below 0.1 GiB
    (the built-in model's figures)."""
    if n >= 2**40:
        return f"{n / 2**40:.2f} TiB"
    if 0 < n < 0.1 * 2**30:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**30:.1f} GiB"


def gi_quantity(n: float) -> str:
    """The smallest whole-Gi quantity holding ``n`` bytes, as a spec value ("58Gi")."""
    return f"{math.ceil(n / 2**30)}Gi"
