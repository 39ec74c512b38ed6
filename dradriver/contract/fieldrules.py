"""Two keywords beyond JSON Schema that a kind's object schema may carry, for fields that
depend on each other or hold text in another language:

* `exactlyOneOf: [field, ...]`: the merged config sets exactly one of these fields. The
  config schema checks it at prepare; at admission, one config setting two of them, and
  the merge of a request's configs setting none or two of them, are refused.
* `jsonTypes: {"field": name, "allowed": [...]}`: the JSON text in string field `name`
  names, in its `"type"` members, only the types in `allowed`, which the schema's builder
  fills from the operator's list (ConfigSchema's `allowed_types`; without one, nothing is
  checked). The schema and admission read the members from the text with one regular
  expression (a CEL program cannot parse JSON), so they judge alike; the handler checks
  the parsed network against the node's own setting at prepare.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

EXACTLY_ONE = "exactlyOneOf"
JSON_TYPES = "jsonTypes"
# A `"type": "<name>"` member of JSON text, as RE2 and Python read it; the name is the
# fourth part when the match is split at its quotes.
TYPE_MEMBER = r'"type"[ \t\n\r]*:[ \t\n\r]*"[^"\\]*"'


def refused_types(text: str, allowed: Sequence[str]) -> list[str]:
    """The `"type"` members of JSON `text` not in `allowed`, as admission reads them."""
    names = [m.split('"')[3] for m in re.findall(TYPE_MEMBER, text)]
    return [n for n in names if n not in allowed]


def refusal(quoted: str) -> str:
    """What a refused type, quoted (JSON's quotes, as CEL's strings.quote writes them),
    is told."""
    return f"plugin {quoted} is not allowed (--cni-plugins, chart settings.cniPlugins)"


def exactly_one_issue(config: Mapping[str, Any], fields: Sequence[str]) -> tuple[str, str] | None:
    """(field, reason) if `config` sets none or more than one of `fields`."""
    present = [f for f in fields if f in config]
    if len(present) == 1:
        return None
    if not present:
        return fields[0], f"required: one of {_names(fields)}"
    both = " both" if len(present) == 2 else ""
    return present[-1], f"{_names(present)} are{both} set: set only one of them"


def _names(fields: Sequence[str]) -> str:
    return " and ".join([", ".join(fields[:-1]), fields[-1]] if len(fields) > 1 else fields)


def with_allowed_types(schema: Any, allowed: Sequence[str]) -> Any:
    """`schema` with every `jsonTypes` keyword's `allowed` list set to `allowed`."""
    if isinstance(schema, list):
        return [with_allowed_types(v, allowed) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: with_allowed_types(v, allowed) for k, v in schema.items()}
    rule = out.get(JSON_TYPES)
    if isinstance(rule, Mapping):
        out[JSON_TYPES] = {**copy.deepcopy(dict(rule)), "allowed": list(allowed)}
    return out
