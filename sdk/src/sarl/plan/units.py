"""Kubernetes quantities to bytes and bytes to short human figures, for the resource plan.

Called by :mod:`sarl.plan` (spec quantities such as ``scratch_size: 256Gi``, the store's
capacity) and by its table. Follows apimachinery's ``resource.Quantity`` suffixes: binary
(Ki..Ei), decimal (k, M..E) and the milli suffix ``m``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Final

_SUFFIXES: Final[dict[str, int | str]] = {
    "": 1,
    "m": "0.001",
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
#: Digits a quantity may have: 2^63 - 1 (apimachinery's limit) has 19.
_MAX_DIGITS: Final = 40
_QUANTITY: Final = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def parse_quantity(value: str) -> int:
    """Bytes (rounded up) of a Kubernetes quantity; ValueError naming the value otherwise.

    Decimal arithmetic: a float would round, and overflow to infinity on a 400-digit value
    (a spec is untrusted input); apimachinery itself caps quantities at 2^63 - 1."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity such as '20Gi' or '4Ti'")
    number, suffix = match.groups()
    if len(number) > _MAX_DIGITS:
        raise ValueError(f"{value[:24]!r}...: a quantity of more than {_MAX_DIGITS} digits")
    return math.ceil(Decimal(number) * Decimal(_SUFFIXES[suffix or ""]))


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
