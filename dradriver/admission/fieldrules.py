"""The keywords of dradriver.contract.fieldrules in CEL.

* `exactlyOneOf`: one config setting two of the fields is refused (`alone`); the merge of
  a request's configs, when they name the type, setting none or two of them too (`merged`).
* `jsonTypes`: the `"type"` members of the field's JSON text, read with a regular
  expression (a CEL program cannot parse JSON), each in the schema's `allowed` list
  (`json_types`). A text the expression cannot read is the node's to refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dradriver.admission.cel import lit
from dradriver.admission.schema import TypeSpec
from dradriver.contract import fieldrules

EXACTLY_ONE = fieldrules.EXACTLY_ONE
JSON_TYPES = fieldrules.JSON_TYPES


def _set(fields: Sequence[str], v: str) -> str:
    """CEL list(string): which of `fields` map `v` has."""
    return f"{lit(list(fields))}.filter(f, f in {v})"


def alone(v: str, schema: Mapping[str, Any], path: str) -> str:
    """CEL list(string): object `v` (a map) sets more than one of the exclusive fields."""
    fields = list(schema[EXACTLY_ONE])
    both = lit(" are both set" if len(fields) == 2 else " are set")
    return (
        f"[{_set(fields, v)}].map(fs, size(fs) < 2 ? [] : [{path} + '.' + fs[size(fs) - 1] + "
        f"': ' + fs.join(' and ') + {both} + ': set only one of them'])[0]"
    )


def json_types(v: str, schema: Mapping[str, Any], path: str) -> str:
    """CEL list(string): the types the JSON text of object `v`'s field names that are not
    allowed (nothing when the schema's builder gave no list)."""
    rule = schema[JSON_TYPES]
    if "allowed" not in rule:
        return "[]"
    field = str(rule["field"])
    text = f"{v}[{lit(field)}]"
    limit = (schema.get("properties") or {}).get(field, {}).get("maxLength")
    bounded = f" && size({text}) <= {int(limit)}" if limit is not None else ""
    allowed = lit(list(rule["allowed"]))
    before, after = fieldrules.refusal("\0").split("\0")  # the message around the name
    return (
        f"{lit(field)} in {v} && type({text}) == string{bounded} ? "
        f"{text}.findAll({lit(fieldrules.TYPE_MEMBER)}).map(m, m.split('\"')[3])"
        f".filter(n, !(n in {allowed})).map(n, {path} + {lit('.' + field + ': ' + before)} + "
        f"strings.quote(n) + {lit(after)}) : []"
    )


def merged(t: TypeSpec, fragments: str, applies: str) -> str | None:
    """CEL string: for target `t` (a request), the merge of `fragments` (CEL list of the
    configs that apply and write a type object of `t`, in merge order) setting none or
    more than one of the exclusive fields, when the configs that apply (CEL condition on
    config `c`: `applies`) name type `t` last (None: no kind of `t` has the keyword).
    Kinds without the keyword are left to the node."""
    having = {k: s for k, s in t.kinds.items() if EXACTLY_ONE in s.rest}
    if not having:
        return None
    fields = list(next(iter(having.values())).rest[EXACTLY_ONE])
    name = lit(t.name)
    context = "' (request ' + t.name + ' at ' + t.path + ')'"
    typed = f"variables.fragments.filter(c, type(c.p) == map && 'type' in c.p && {applies})"
    kinds = f"fs.filter(c, 'kind' in c.p[{name}])"
    kind = f"(size(ks) == 0 ? {lit(next(iter(having)))} : ks[size(ks) - 1].p[{name}].kind)"
    for_kind = "true" if len(having) == len(t.kinds) else f"{kind} in {lit(list(having))}"
    sets = f"{lit(fields)}.filter(f, fs.exists(c, f in c.p[{name}]))"
    none = (
        f"last.path + {lit('.' + t.name + '.' + fields[0] + ': required: one of ')} + "
        f"{lit(' and '.join(fields))} + ' (no config for the request and none of DeviceClass ' "
        f"+ variables.deviceClass + ' sets one)' + {context}"
    )
    # Named at the last config setting one of them, and the last of them it sets.
    both = (
        f"[fs.filter(c, {lit(fields)}.exists(f, f in c.p[{name}]))].map(ws, "
        f"[ws[size(ws) - 1]].map(w, [{lit(fields)}.filter(f, f in w.p[{name}])].map(its, "
        f"w.path + {lit('.' + t.name + '.')} + its[size(its) - 1] + ': ' + on.join(' and ') "
        f"+ ' are set by the configs that apply: set only one of them' + {context})[0])[0])[0]"
    )
    return (
        f"[{typed}].map(tys, size(tys) == 0 || tys[size(tys) - 1].p['type'] != {name} ? '' :\n"
        f"[tys[size(tys) - 1]].map(last, [{fragments}].map(fs,\n"
        f"[{kinds}].map(ks, !({for_kind}) ? '' :\n"
        f"[{sets}].map(on, size(on) == 1 ? '' : size(on) == 0 ? {none} : {both})[0])[0])[0])[0])[0]"
    )
