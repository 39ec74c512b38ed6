"""Which drivers the cluster's DeviceClasses select, read from their CEL selectors.

A class selects a driver's devices unless one of its selectors (they must all hold)
compares `device.driver` with another driver's name. A selector that tests the driver some
other way is taken as possibly selecting any driver: a warning must never be wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_LITERAL = r"""(?:"([^"\\]*)"|'([^'\\]*)')"""
_DRIVER_EQUALS = re.compile(
    rf"\bdevice\.driver\s*==\s*{_LITERAL}|{_LITERAL}\s*==\s*device\.driver\b"
)

_ALTERNATIVE = re.compile(r"\|\||\?|!(?!=)")  # `||`, a conditional, a negation (not `!=`)


def drivers_of(device_class: Mapping[str, Any]) -> set[str] | None:
    """The driver names the class's selectors require (an empty set: none can match at
    once), or None when the class may select any driver."""
    required: set[str] | None = None
    for selector in (device_class.get("spec") or {}).get("selectors") or []:
        expression = str(((selector or {}).get("cel") or {}).get("expression") or "")
        names = {a or b or c or d for a, b, c, d in _DRIVER_EQUALS.findall(expression)}
        if len(names) == 1 and _is_conjunction_of_driver(expression):
            required = names if required is None else required & names
    return required


def _is_conjunction_of_driver(expression: str) -> bool:
    """Whether the driver comparison must hold for the whole expression to hold: it is
    not under an `||`, a `!` or a conditional, where the selector could match without it."""
    return _ALTERNATIVE.search(expression) is None


def classes_for(driver: str, classes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names of the classes that may select `driver`'s devices."""
    return [
        str((c.get("metadata") or {}).get("name") or "")
        for c in classes
        if (names := drivers_of(c)) is None or driver in names
    ]


def named_drivers(classes: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per driver name the classes' selectors require, the classes that require it."""
    out: dict[str, list[str]] = {}
    for c in classes:
        for name in sorted(drivers_of(c) or ()):
            out.setdefault(name, []).append(str((c.get("metadata") or {}).get("name") or ""))
    return out
