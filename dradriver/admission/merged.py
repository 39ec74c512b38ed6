"""The policy that checks what merging a claim's configs with its DeviceClass's makes known.

It takes each DeviceClass as a parameter (its binding selects them all), so it runs once
per class for a new ResourceClaim or ResourceClaimTemplate, and looks at the requests
(and firstAvailable subrequests) of that class when the class is this driver's (it has
a config of ours or a selector naming the driver: the driver merges nothing into
another driver's requests). For each, the configs that apply are the
class's (all, first) and then the claim's for that request, as the driver merges them.
When one of them names the kind of a type object (the last one wins, as in the merge):

* every required field of that kind is set by one of them;
* every field any of them sets for that type belongs to that kind;
* the value that wins for a field whose schema differs between kinds suits that kind;
* of fields that exclude each other (fieldrules.py), exactly one is set, when they name
  the type last.

When none names the kind, the allocated device decides it and the node checks. The work
grows with requests times configs; past MAX_PAIRS the policy leaves the claim to the
per-config policy and the node rather than risk its cost limit.
"""

from __future__ import annotations

from dradriver.admission import fieldrules, ifrules
from dradriver.admission.cel import Translator, concat, key_path, key_set, lit
from dradriver.admission.fragment import ours
from dradriver.admission.schema import TypeSpec

DEVICES = (
    "(request.kind.kind == 'ResourceClaimTemplate' ? object.?spec.?spec.?devices : "
    "object.?spec.?devices).orValue({})"
)
USES_CLASS = (
    f"{DEVICES}.?requests.orValue([]).exists(r,\n"
    "r.?exactly.?deviceClassName.orValue('') == params.metadata.name ||\n"
    "r.?firstAvailable.orValue([]).exists(s, "
    "s.?deviceClassName.orValue('') == params.metadata.name))"
)
# CEL: config `c` applies to target request `t`.
APPLIES = "(size(c.requests) == 0 || t.name in c.requests || t.base in c.requests)"
RULED = 16  # (request, config) pairs whose merge the interface rules check, at most
MAX_PAIRS = 1024  # (request or subrequest of the class, config of ours) pairs checked at most
FRAGMENT = (
    "{{'path': dyn({path}),\n 'p': dyn(c.opaque.?parameters.orValue({{}})),\n"
    " 'requests': dyn({requests})}}"
)


def has_config(driver: str) -> str:
    """CEL match condition: the class or the claim has a config of `driver`."""
    return (
        f"params.?spec.?config.orValue([]).exists(c, {ours('c', driver)}) ||\n"
        f"{DEVICES}.?config.orValue([]).exists(c, {ours('c', driver)})"
    )


def ours_class(driver: str) -> str:
    """CEL: the DeviceClass (`params`) is one of `driver`'s: it has a config of ours, or
    a selector naming the driver (its name, or its attributes' domain)."""
    return (
        f"params.?spec.?config.orValue([]).exists(c, {ours('c', driver)}) ||\n"
        "params.?spec.?selectors.orValue([]).exists(s, "
        f"s.?cel.?expression.orValue('').contains({lit(driver)}))"
    )


def variables(tr: Translator, types: list[TypeSpec], driver: str) -> list[tuple[str, str]]:
    """(name, expression) of the policy's variables; `issues` lists every problem."""
    class_path = (
        "'DeviceClass ' + variables.deviceClass + ' spec.config[' + string(i) + "
        "'].opaque.parameters'"
    )
    out = [
        ("devices", DEVICES),
        (
            "prefix",
            "request.kind.kind == 'ResourceClaimTemplate' ? 'spec.spec.devices' : 'spec.devices'",
        ),
        ("deviceClass", "params.metadata.name"),
        # A class of another driver: the driver never merges our configs into its
        # requests (an unscoped config of ours does not reach them).
        ("oursClass", ours_class(driver)),
        (
            "fragments",
            f"params.?spec.?config.orValue([]).transformList(i, c, {ours('c', driver)},\n"
            + FRAGMENT.format(path=class_path, requests="[]")
            + ") +\n"
            f"variables.devices.?config.orValue([]).transformList(i, c, {ours('c', driver)},\n"
            + FRAGMENT.format(
                path="variables.prefix + '.config[' + string(i) + '].opaque.parameters'",
                requests="c.?requests.orValue([])",
            )
            + ")",
        ),
        (
            "targets",
            "variables.devices.?requests.orValue([]).transformList(i, r,\n"
            "r.?exactly.?deviceClassName.orValue('') == variables.deviceClass ?\n"
            "[{'name': string(r.name), 'base': string(r.name),\n"
            "  'path': variables.prefix + '.requests[' + string(i) + ']'}] :\n"
            "r.?firstAvailable.orValue([]).transformList(j, s,\n"
            "s.?deviceClassName.orValue('') == variables.deviceClass,\n"
            "{'name': string(r.name) + '/' + string(s.name), 'base': string(r.name),\n"
            " 'path': variables.prefix + '.requests[' + string(i) + '].firstAvailable['"
            " + string(j) + ']'}))",
        ),
    ]
    out.append(
        (
            "bounded",
            f"variables.targets.map(ts, size(ts)).sum() * size(variables.fragments) <= {MAX_PAIRS}",
        )
    )
    out.append(
        (
            "ruled",
            "variables.bounded && "
            f"variables.targets.map(ts, size(ts)).sum() * size(variables.fragments) <= {RULED}",
        )
    )
    names: list[str] = []
    for t in types:
        for prefix, body in (
            ("type", type_issues(tr, t)),
            ("one", fieldrules.merged(t, _fragments(t), APPLIES)),
            ("rules", rule_issues(t)),
        ):
            if body is None:
                continue
            # The rules have a variable of their own, for their own cost limit, and a
            # tighter bound: past RULED requests, the node's.
            bound = "variables.ruled" if prefix == "rules" else "variables.bounded"
            name = f"{prefix}{len(names) + 1}"
            names.append(name)
            none = "variables.targets.map(ts, '')" if prefix == "rules" else "[]"
            out.append(
                (
                    name,
                    f"!{bound} ? {none} :\n"
                    f"variables.targets.map(ts, ts.map(t,\n{body}).filter(s, s != '').join('; '))",
                )
            )
    per_request = ", ".join(f"string(variables.{n}[i])" for n in names)
    out.append(
        (
            "issues",
            "!variables.bounded || !variables.oursClass ? [] :\n"
            f"variables.targets.transformList(i, ts, [{per_request}]"
            ".filter(s, s != '').join('; ')).filter(s, s != '')",
        )
    )
    return out


def type_issues(tr: Translator, t: TypeSpec) -> str | None:
    """CEL string: the problems of type `t` for target request `t` (None: nothing to check)."""
    name = lit(t.name)
    dot = lit("." + t.name)
    kinds = list(t.kinds)
    required = {k: list(s.required) for k, s in t.kinds.items() if s.required}
    dependent = [f for f in t.fields[1:] if len(t.groups(f)) > 1]
    if not required and not dependent and not t.closed:
        return None
    # CEL: where the kind comes from and which request (the target `t`) it is about.
    context = (
        f"' (' + {lit(t.name + ' kind ')} + k + ' from ' + last.path + "
        f"{lit('.' + t.name + '.kind')} + ', request ' + t.name + ' at ' + t.path + ')'"
    )
    parts: list[str] = []
    if required:
        needed = lit(required)
        parts.append(
            f"(k in {needed} ? {needed}[k] : []).filter(f, !fs.exists(c, f in c.p[{name}]))"
            f".map(f, last.path + {dot} + '.' + f + ': required; no config for the request "
            f"and none of DeviceClass ' + variables.deviceClass + ' sets it' + {context})"
        )
    if t.closed:
        by_kind = "{" + ", ".join(f"{lit(k)}: {key_set(s)}" for k, s in t.kind_sets().items()) + "}"
        parts.append(
            f"fs.filter(c, c.path != last.path && size(c.p[{name}]) <= {len(t.fields)})"
            f".map(c, c.p[{name}].filter(f, f in {key_set(t.fields)} && !(f in {by_kind}[k]))"
            f".map(f, c.path + {dot} + {key_path('f')} + ': not a field of this kind' + {context})"
            ".join('; ')).filter(s, s != '')"
        )
    for field in dependent:
        v, p = f"lv.p[{name}][{lit(field)}]", f"lv.path + {dot} + {lit('.' + field)}"
        checks = [
            (having, tr.issues(v, schema, p, f"{t.name}.{field}"))
            for having, schema in t.groups(field)
        ]
        switch = " : ".join(f"k in {lit(having)} ? ({c})" for having, c in checks) + " : []"
        parts.append(
            f"[fs.filter(c, {lit(field)} in c.p[{name}])].map(vs, size(vs) == 0 || "
            "vs[size(vs) - 1].path == last.path ? [] :\n"
            f"[vs[size(vs) - 1]].map(lv, ({switch}).map(m, m + {context}))[0])[0]"
        )
    return (
        f"[{_fragments(t)}].map(fs,\n"
        f"[fs.filter(c, 'kind' in c.p[{name}])].map(ks, size(ks) == 0 ? '' :\n"
        f"[ks[size(ks) - 1]].map(last, [last.p[{name}].kind].map(k, !(k in {lit(kinds)}) ? '' :\n"
        f"({concat(parts)}).join('; '))[0])[0])[0])[0]"
    )


def _fragments(t: TypeSpec) -> str:
    """CEL: the fragments that apply to target `t` and write a type object of `t`."""
    name = lit(t.name)
    return (
        f"variables.fragments.filter(c, type(c.p) == map && {name} in c.p && "
        f"type(c.p[{name}]) == map && {APPLIES})"
    )


def rule_issues(t: TypeSpec) -> str | None:
    """CEL string: what the merge of target `t`'s fragments breaks of the interfaceRules
    of type `t`'s kinds (None: no kind has them)."""
    having = {k: s for k, s in t.kinds.items() if ifrules.KEYWORD in s.rest}
    if not having:
        return None
    reach = [k for k, s in having.items() if not s.rest[ifrules.KEYWORD].get("keepsAddresses")]
    context = "' (request ' + t.name + ' at ' + t.path + ')'"
    name = lit(t.name)
    kind = f"(size(ks) == 0 ? '' : ks[size(ks) - 1].p[{name}].kind)"
    props = next(iter(having.values())).properties
    check = ifrules.merged("fs", t.name, kind, props, reach, context)
    applies = "true" if len(having) == len(t.kinds) else f"{kind} in {lit(list(having))}"
    return (
        f"[{_fragments(t)}].map(fs, [fs.filter(c, 'kind' in c.p[{name}])].map(ks, "
        f"{applies} ? ({check}).join('; ') : '')[0])[0]"
    )
