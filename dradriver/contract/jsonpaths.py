"""JSON paths and short quotes of values, as config errors name them."""

from __future__ import annotations

import json


def brief(value: object) -> str:
    """`value` as an error quotes it: its repr, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def join(path: str, key: object) -> str:
    """`path` and `key`: `.key` for an identifier, else `["key"]`."""
    key = str(key)
    return f"{path}.{key}" if key.isidentifier() and key.isascii() else f"{path}[{json.dumps(key)}]"
