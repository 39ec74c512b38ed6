"""Kubernetes resource quantities (`100M`, `1Gi`, `2.5G`, `1e9`) as whole numbers. Pure.

The driver reads quantities in two places: the operator's bandwidth settings and the
capacity the scheduler gives a claim (`consumedCapacity`). Both are whole numbers of
bits per second; a fraction of a bit is rounded up, as the API server rounds a quantity.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "m": Decimal("0.001"),
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
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[mkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_DECIMAL = ((10**18, "E"), (10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def parse(text: str) -> int:
    """The whole number a quantity stands for, rounded up; ValueError names the text."""
    match = _QUANTITY.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a quantity (e.g. 100M, 1G, 1Gi)")
    try:
        number = Decimal(match["number"])
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a quantity (e.g. 100M, 1G, 1Gi)") from None
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > 30:
            raise ValueError(f"{text!r} is out of range")
        scaled = number * Decimal(10) ** exponent
    else:
        scaled = number * _SUFFIXES[match["suffix"] or ""]
    return math.ceil(scaled)


def render(value: int) -> str:
    """`value` in the shortest exact decimal form the API server prints (100M, 1500k)."""
    for factor, suffix in _DECIMAL:
        if value and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
