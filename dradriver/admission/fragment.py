"""The policy that checks each opaque config of ours on its own, as a fragment.

A config is merged with others before the driver reads it, so it need not be complete
(`type`, `kind` and required fields may come from elsewhere), but whatever it writes must
be something the driver can accept: each field must exist (for the kind it names, or, if
it names none, for some single kind of its type) and each value must be valid (for that
kind, or for some kind that has the field).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.admission.cel import Translator, concat, key_path, key_set, lit, when
from dradriver.admission.schema import TypeSpec

# The configs of the object under review, and the JSON path of that list.
CONFIGS = (
    "request.kind.kind == 'DeviceClass' ? object.?spec.?config.orValue([]) :\n"
    "request.kind.kind == 'ResourceClaimTemplate' ? "
    "object.?spec.?spec.?devices.?config.orValue([]) :\n"
    "object.?spec.?devices.?config.orValue([])"
)
RULED = 16  # configs of one object whose hand-written rules are checked, at most
PREFIX = (
    "request.kind.kind == 'DeviceClass' ? 'spec.config' :\n"
    "request.kind.kind == 'ResourceClaimTemplate' ? 'spec.spec.devices.config' :\n"
    "'spec.devices.config'"
)


def ours(c: str, driver: str) -> str:
    """CEL: whether config `c` is an opaque config for `driver`."""
    return f"{c}.?opaque.?driver.orValue('') == {lit(driver)}"


def variables(
    tr: Translator, schema: Mapping[str, Any], types: list[TypeSpec], driver: str
) -> list[tuple[str, str]]:
    """(name, expression) of the policy's variables; `issues` lists every problem."""
    top = tr.closed(
        "c.p",
        ["type", *(t.name for t in types)],
        "c.path",
        when(
            "'type' in c.p",
            tr.issues("c.p['type']", schema["properties"]["type"], "c.path + '.type'", "type"),
        ),
    )
    out = [
        ("configs", CONFIGS),
        ("prefix", PREFIX),
        (
            "ours",
            f"variables.configs.transformList(i, c, {ours('c', driver)},\n"
            "{'path': dyn(variables.prefix + '[' + string(i) + '].opaque.parameters'),\n"
            " 'p': dyn(c.opaque.?parameters.orValue({}))})",
        ),
        (
            "top",
            "variables.ours.map(c, (type(c.p) != map ? [c.path + ': must be an object'] :\n"
            f"{top}).join('; '))",
        ),
    ]
    names = ["top"]
    for t in types:
        path = f"c.path + {lit('.' + t.name)}"
        name = f"type{len(names)}"
        names.append(name)
        body = type_issues(tr, t, "o", path)
        out.append(
            (
                name,
                f"variables.ours.map(c, type(c.p) == map && {lit(t.name)} in c.p ?\n"
                f"[c.p[{lit(t.name)}]].map(o,\n{body})[0].join('; ') : '')",
            )
        )
        rules = rule_issues(tr, t, "o", path)
        if rules == "[]":
            continue
        name = f"rules{len(names)}"
        names.append(name)
        # Their own variable, for their own cost limit; past RULED configs, the node's.
        out.append(
            (
                name,
                f"variables.ours.transformList(i, c, i < {RULED} && type(c.p) == map && "
                f"{lit(t.name)} in c.p && type(c.p[{lit(t.name)}]) == map ?\n"
                f"[c.p[{lit(t.name)}]].map(o,\n{rules})[0].join('; ') : '')",
            )
        )
    per_config = ", ".join(f"string(variables.{n}[i])" for n in names)
    out.append(
        (
            "issues",
            f"variables.ours.transformList(i, c, [{per_config}]"
            ".filter(s, s != '').join('; ')).filter(s, s != '')",
        )
    )
    return out


def type_issues(tr: Translator, t: TypeSpec, o: str, path: str) -> str:
    """CEL list(string): the problems of one type object `o` written by one config."""
    kinds = list(t.kinds)
    fields = t.fields
    named = f"('kind' in {o} && {o}.kind in {lit(kinds)})"
    kind_check = tr.issues(f"{o}.kind", {"enum": kinds}, f"{path} + '.kind'", f"{t.name}.kind")
    parts = [when(f"'kind' in {o}", kind_check)]
    if t.closed:
        sets = t.kind_sets()
        by_kind = "{" + ", ".join(f"{lit(k)}: {key_set(s)}" for k, s in sets.items()) + "}"
        f, ks, f2, f3 = tr.var(), tr.var(), tr.var(), tr.var()
        parts.append(
            f"{named} ? {o}.filter({f}, !({f} in {by_kind}[{o}.kind]))"
            f".map({f}, {path} + {key_path(f)} + "
            f"{lit(f': unknown field for {t.name} kind ')} + {o}.kind) : []"
        )
        every = key_set(fields)
        all_sets = "[" + ", ".join(key_set(s) for s in sets.values()) + "]"
        parts.append(
            f"!('kind' in {o}) && {o}.all({f}, {f} in {every}) && "
            f"!{all_sets}.exists({ks}, {o}.all({f2}, {f2} in {ks})) ?\n"
            f"[{path} + {lit(f': no {t.name} kind has all of ')} + "
            f"{lit(fields)}.filter({f3}, {f3} in {o}).join(', ') + '; name the kind'] : []"
        )
        unknown = tr.closed(o, fields, path, "[]", f" (no {t.name} kind has it)")
        parts.append(f"{named} ? [] : {unknown}")
    for name in fields[1:]:
        parts.append(field_issues(tr, t, o, path, name, named))
    body = concat(parts)
    if t.closed:
        body = (
            f"size({o}) > {len(fields)} ? [{path} + ': has ' + string(size({o})) + "
            f"{lit(f' fields, more than any {t.name} kind has')}] :\n{body}"
        )
    return f"type({o}) != map ? [{path} + ': must be an object'] :\n{body}"


def rule_issues(tr: Translator, t: TypeSpec, o: str, path: str) -> str:
    """CEL list(string): what the hand-written rules of `t`'s kinds (Translator.rules)
    find in type object `o` (a map) written by one config."""
    parts = []
    for keyword, rule in tr.rules.items():
        having = [k for k, spec in t.kinds.items() if keyword in spec.rest]
        if having:
            spec = t.kinds[having[0]]
            check = rule(o, {**spec.rest, "properties": spec.properties}, path)
            if len(having) < len(t.kinds):
                named = f"('kind' in {o} && {o}.kind in {lit(having)})"
                check = when(named, check)
            parts.append(check)
    return concat(parts)


def field_issues(tr: Translator, t: TypeSpec, o: str, path: str, name: str, named: str) -> str:
    """One field's value: for the named kind, or, without a kind, for some kind having it."""
    v, p, where = f"{o}[{lit(name)}]", f"{path} + {lit('.' + name)}", f"{t.name}.{name}"
    groups = t.groups(name)
    if len(groups) == 1:
        having, schema = groups[0]
        check = tr.issues(v, schema, p, where)
        if check == "[]":
            return "[]"
        if len(having) == len(t.kinds):
            return when(f"{lit(name)} in {o}", check)
        # A named kind without the field: the unknown-field check reports it.
        return when(f"{lit(name)} in {o} && (!{named} || {o}.kind in {lit(having)})", check)
    checks = [(having, tr.issues(v, schema, p, where)) for having, schema in groups]
    switch = " : ".join(f"{o}.kind in {lit(having)} ? ({c})" for having, c in checks) + " : []"
    ls, ls1, m = tr.var(), tr.var(), tr.var()
    labelled = [
        f"{ls}[{i}].map({m}, {m} + {lit(' (kind ' + ', '.join(having) + ')')})"
        for i, (having, _) in enumerate(checks)
    ]
    any_kind = (
        f"[[{', '.join(c for _, c in checks)}]].map({ls}, "
        f"{ls}.exists({ls1}, size({ls1}) == 0) ? [] : {concat(labelled)})[0]"
    )
    return f"{lit(name)} in {o} ? ({named} ? ({switch}) :\n'kind' in {o} ? [] : {any_kind}) : []"
