"""JSON Schema fragments of the opaque config as CEL expressions that list what is wrong.

`Translator.issues(value, schema, path)` is a CEL expression of type list(string): one
"<path>: <reason>" per problem of `value` (a CEL expression) under `schema`, empty when
valid. It reads the keywords the handlers use with the driver's semantics (see
dradriver/contract/config.py): types (integer: a 64-bit JSON integer), enum, const, not {enum},
pattern (dradriver/contract/patterns.py's common dialect), formats cidr (a claim's address:
Kubernetes' isCIDR and dradriver.contract.iprules' rule 1), route-destination and route-gateway
(Kubernetes' isCIDR/isIP, which the driver matches), string lengths, numeric ranges,
arrays (items, sizes, uniqueness) and objects (properties, additionalProperties false or
a schema, propertyNames, maxProperties; required inside list items, which are never
merged). A keyword it cannot translate is left unchecked (the policy stays lenient: the
node still checks) and reported as a warning. Every list and object is bounded before it
is iterated, so the cost stays small whatever the input.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from dradriver.contract import iprules, patterns
from dradriver.contract.schemacheck import ANNOTATIONS

CIDR_HINT = "must be an address with a prefix length, e.g. 10.0.0.2/24"
IGNORED = ANNOTATIONS  # keywords that check nothing, as the driver's own validator skips them
TYPE_TESTS = {
    "string": "type({v}) == string",
    "integer": "type({v}) == int",
    "number": "(type({v}) == int || type({v}) == double)",
    "boolean": "type({v}) == bool",
    "object": "type({v}) == map",
    "array": "type({v}) == list",
    "null": "type({v}) == null_type",
}
TYPE_NAMES = {
    "string": "a string", "integer": "an integer", "number": "a number",
    "boolean": "true or false", "object": "an object", "array": "a list", "null": "null",
}  # fmt: skip
STRING_KEYWORDS = {"pattern", "format", "minLength", "maxLength", "not"}
NUMBER_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
ARRAY_KEYWORDS = {"items", "maxItems", "minItems", "uniqueItems"}
OBJECT_KEYWORDS = {
    "properties", "additionalProperties", "required", "propertyNames", "maxProperties",
}  # fmt: skip
TRANSLATED = (
    {"type", "enum", "const", "description"}
    | STRING_KEYWORDS
    | NUMBER_KEYWORDS
    | ARRAY_KEYWORDS
    | OBJECT_KEYWORDS
)
UNIQUE_BOUND = 64  # uniqueness is quadratic: checked only on lists up to this size
SHOWN_CHARS = 40  # of a string value quoted in a message


def lit(value: Any) -> str:
    """`value` (JSON) as a CEL literal."""
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        return f"'{escaped}'"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Sequence):
        items = [lit(v) for v in value]
        if len({type(v) for v in value}) > 1:  # CEL literals must be homogeneous
            items = [f"dyn({i})" for i in items]
        return f"[{', '.join(items)}]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no CEL literal for {value!r}")


def key_set(keys: Sequence[str]) -> str:
    """A CEL map literal whose keys are `keys`: `k in <it>` costs one lookup."""
    return "{" + ", ".join(f"{lit(k)}: true" for k in keys) + "}"


def key_path(key: str) -> str:
    """CEL: `.key` for an identifier, else `["key"]` (a key read from the object)."""
    return (
        f"({key}.matches('^[A-Za-z_][A-Za-z0-9_]*$') ? '.' + {key} : "
        f"'[' + strings.quote({key}) + ']')"
    )


def show_string(v: str) -> str:
    """CEL: a string value quoted (escapes included) and cut to SHOWN_CHARS."""
    return (
        f"(size({v}) > {SHOWN_CHARS} ? strings.quote({v}.substring(0, {SHOWN_CHARS})) + '...'"
        f" : strings.quote({v}))"
    )


def show(v: str) -> str:
    """CEL: any JSON value, briefly."""
    return (
        f"(type({v}) == string ? {show_string(v)} : "
        f"type({v}) == int || type({v}) == double || type({v}) == bool ? string({v}) : "
        f"type({v}) == null_type ? 'null' : type({v}) == list ? 'a list' : 'an object')"
    )


def concat(parts: Sequence[str]) -> str:
    """CEL: the concatenation of list expressions (`[]` for none)."""
    return " +\n".join(p if p == "[]" else f"({p})" for p in parts) if parts else "[]"


def when(cond: str, then: str, otherwise: str = "[]") -> str:
    """CEL: `cond ? then : otherwise`; CEL's grammar needs a conditional `then` in parentheses."""
    if "?" in then:
        then = f"({then})"
    return f"{cond} ? {then} : {otherwise}"


def plain(value: Any) -> str:
    """A JSON value as a message shows it (strings bare)."""
    return value if isinstance(value, str) else json.dumps(value)


# A keyword of an object's schema written by hand in CEL: (value, the object's schema,
# path) -> CEL list(string) of its problems (admission/ifrules.py, admission/fieldrules.py).
ObjectRule = Callable[[str, Mapping[str, Any], str], str]


@dataclass
class Translator:
    """Translates schema fragments; collects what it could not translate. `rules`: the
    keywords of object schemas that hand-written CEL checks."""

    warnings: list[str] = field(default_factory=list)
    rules: Mapping[str, ObjectRule] = field(default_factory=dict)
    _names: Any = field(default_factory=lambda: count(1))

    def var(self) -> str:
        """A fresh comprehension variable name."""
        return f"x{next(self._names)}"

    def issues(
        self, v: str, schema: Mapping[str, Any], path: str, where: str, whole: bool = False
    ) -> str:
        """CEL list(string): the problems of value `v` at CEL string `path` under `schema`.

        `whole`: `v` is never merged with another config's (an item of a list, which a
        later config replaces as a whole), so its `required` fields can be checked."""
        description = schema.get("description")
        schema = {k: s for k, s in schema.items() if k not in IGNORED}
        if description:
            schema["description"] = description  # read by _string, checks nothing
        declared = schema.get("type")
        types = [declared] if isinstance(declared, str) else list(declared or [])
        self.warnings += [
            f"{where}: keyword {kw} is not checked"
            for kw in schema.keys() - TRANSLATED - self.rules.keys()
        ]
        parts = [p for p in (self._enum(v, schema, path), self._const(v, schema, path)) if p]
        for group, test_type, build in (
            (STRING_KEYWORDS, "string", self._string),
            (NUMBER_KEYWORDS, "number", self._number),
            (ARRAY_KEYWORDS, "array", self._array),
            (OBJECT_KEYWORDS, "object", self._object),
        ):
            if not group & schema.keys():
                continue
            body = build(v, schema, path, where, whole)
            if body == "[]":
                continue
            only = types == [test_type] or (test_type == "number" and types == ["integer"])
            if only:
                parts.append(body)  # the type test below guards it already
            else:
                parts.append(when(TYPE_TESTS[test_type].format(v=v), body))
        body = concat(parts)
        if not types:
            return body
        unknown = [t for t in types if t not in TYPE_TESTS]
        if unknown:
            self.warnings.append(f"{where}: type {unknown} is not checked")
            return body
        test = " || ".join(TYPE_TESTS[t].format(v=v) for t in types)
        wanted = " or ".join(TYPE_NAMES[t] for t in types)
        return when(test, body, f"[{path} + {lit(': must be ' + wanted)}]")

    def _enum(self, v: str, schema: Mapping[str, Any], path: str) -> str:
        if "enum" not in schema:
            return ""
        values = list(schema["enum"])
        reason = " is not one of " + ", ".join(plain(x) for x in values)
        return f"{v} in {lit(values)} ? [] : [{path} + ': ' + {show(v)} + {lit(reason)}]"

    def _const(self, v: str, schema: Mapping[str, Any], path: str) -> str:
        if "const" not in schema:
            return ""
        want = schema["const"]
        return f"{v} == {lit(want)} ? [] : [{path} + {lit(': must be ' + plain(want))}]"

    def _string(
        self, v: str, schema: Mapping[str, Any], path: str, where: str, whole: bool = False
    ) -> str:
        described: list[str] = []  # conditions whose failure the description explains
        parts: list[str] = []
        pattern = schema.get("pattern")
        if pattern is not None:
            if problems := patterns.problems(pattern):
                self.warnings.append(f"{where}: pattern {pattern!r} is not checked: {problems}")
            else:
                described.append(f"{v}.matches({lit(pattern)})")
        negated = schema.get("not")
        if negated is not None:
            if set(negated) == {"enum"}:
                described.append(f"!({v} in {lit(list(negated['enum']))})")
            else:
                self.warnings.append(f"{where}: not {negated} is not checked")
        # A message joins issues with "; ": a description must not look like a second one.
        description = str(schema.get("description") or "").replace("; ", ", ")
        invalid = f"{path} + ': ' + {show_string(v)} + {lit(' is invalid: ')}"
        if described:
            reason = description or (f"must match {pattern}" if pattern else "a reserved value")
            parts.append(f"{' && '.join(described)} ? [] : [{invalid} + {lit(reason)}]")
        fmt = schema.get("format")
        if fmt in FORMATS:
            parts.append(FORMATS[fmt](v, invalid))
        elif fmt is not None:
            self.warnings.append(f"{where}: format {fmt} is not checked")
        if "minLength" in schema:
            n = int(schema["minLength"])
            reason = description or f"must be at least {n} characters long"
            parts.append(f"size({v}) >= {n} ? [] : [{invalid} + {lit(reason)}]")
        body = concat(parts)
        if "maxLength" not in schema:
            return body
        # First, and alone: a long string never reaches a regular expression (cost).
        n = int(schema["maxLength"])
        reason = description or f"must be at most {n} characters long"
        return when(f"size({v}) > {n}", f"[{invalid} + {lit(reason)}]", body)

    def _number(
        self, v: str, schema: Mapping[str, Any], path: str, where: str, whole: bool = False
    ) -> str:
        conds, words = [], []
        for kw, op, word in (
            ("minimum", ">=", "at least"),
            ("exclusiveMinimum", ">", "more than"),
            ("maximum", "<=", "at most"),
            ("exclusiveMaximum", "<", "less than"),
        ):
            if kw in schema:
                conds.append(f"{v} {op} {lit(schema[kw])}")
                words.append(f"{word} {plain(schema[kw])}")
        if not conds:
            return "[]"
        if "minimum" in schema and "maximum" in schema and len(conds) == 2:
            reason = f" is out of range {plain(schema['minimum'])}-{plain(schema['maximum'])}"
        else:
            reason = " must be " + " and ".join(words)
        return f"{' && '.join(conds)} ? [] : [{path} + ': ' + string({v}) + {lit(reason)}]"

    def _array(
        self, v: str, schema: Mapping[str, Any], path: str, where: str, whole: bool = False
    ) -> str:
        parts: list[str] = []
        if "minItems" in schema:
            n = int(schema["minItems"])
            parts.append(f"size({v}) >= {n} ? [] : [{path} + {lit(f': needs at least {n} items')}]")
        bound = schema.get("maxItems")
        if schema.get("uniqueItems"):
            a, b = self.var(), self.var()
            unique = f"{v}.all({a}, {v}.exists_one({b}, {b} == {a}))"
            if bound is None or int(bound) > UNIQUE_BOUND:
                unique = f"size({v}) > {UNIQUE_BOUND} || {unique}"
            parts.append(f"{unique} ? [] : [{path} + ': repeats an item']")
        if "items" in schema:
            i, x, m = self.var(), self.var(), self.var()
            item = self.issues(
                x, schema["items"], f"{path} + '[' + string({i}) + ']'", f"{where}[]", True
            )
            if item != "[]":
                parts.append(
                    f"{v}.transformList({i}, {x}, ({item}).join('; ')).filter({m}, {m} != '')"
                )
        body = concat(parts)
        if bound is None:
            return body
        n = int(bound)
        too_many = (
            f"[{path} + ': has ' + string(size({v})) + {lit(f' items, at most {n} are allowed')}]"
        )
        return f"size({v}) > {n} ? {too_many} : {body}"

    def _object(
        self, v: str, schema: Mapping[str, Any], path: str, where: str, whole: bool = False
    ) -> str:
        props: Mapping[str, Any] = schema.get("properties") or {}
        parts = []
        for name, sub in props.items():
            inner = self.issues(
                f"{v}[{lit(name)}]", sub, f"{path} + {lit('.' + name)}", f"{where}.{name}", whole
            )
            if inner != "[]":
                parts.append(when(f"{lit(name)} in {v}", inner))
        for name in schema.get("required") or ():
            if whole:
                reason = f".{name}: {name!r} is a required property"
                parts.append(f"{lit(name)} in {v} ? [] : [{path} + {lit(reason)}]")
            else:  # another config may set a nested field: the merge, not a fragment, has it
                self.warnings.append(f"{where}: required {name} is not checked")
        names = schema.get("propertyNames")
        if names is not None:
            parts.append(self._key_issues(v, names, path, where))
        extra = schema.get("additionalProperties", True)
        if isinstance(extra, Mapping):
            parts.append(self._values(v, list(props), extra, path, where))
        parts += [rule(v, schema, path) for kw, rule in self.rules.items() if kw in schema]
        body = concat([p for p in parts if p != "[]"])
        if "maxProperties" in schema:
            n = int(schema["maxProperties"])
            too_many = f"[{path} + ': has ' + string(size({v})) + {lit(f' fields, at most {n}')}]"
            body = f"size({v}) > {n} ? {too_many} : {body}"
        elif extra is not False and (names is not None or isinstance(extra, Mapping)):
            self.warnings.append(f"{where}: an object without maxProperties is not bounded")
        if extra is True or isinstance(extra, Mapping):
            return body
        if extra is not False:
            self.warnings.append(f"{where}: additionalProperties {extra} is not checked")
            return body
        return self.closed(v, list(props), path, body)

    def _key_issues(self, v: str, names: Mapping[str, Any], path: str, where: str) -> str:
        """CEL: the keys of object `v` that `names` (pattern, maxLength) refuses."""
        k = self.var()
        described = []
        pattern = names.get("pattern")
        if pattern is not None:
            if problems := patterns.problems(pattern):
                self.warnings.append(f"{where}: pattern {pattern!r} is not checked: {problems}")
            else:
                described.append(f"{k}.matches({lit(pattern)})")
        if "maxLength" in names:  # first: a long key never reaches the regular expression
            described.insert(0, f"size({k}) <= {int(names['maxLength'])}")
        unknown = set(names) - {"pattern", "maxLength", "description"}
        self.warnings += [f"{where}: propertyNames keyword {kw} is not checked" for kw in unknown]
        if not described:
            return "[]"
        reason = " is invalid: " + str(names.get("description") or "a key it does not allow")
        return (
            f"{v}.filter({k}, !({' && '.join(described)}))"
            f".map({k}, {path} + {key_path(k)} + ': ' + {show_string(k)} + {lit(reason)})"
        )

    def _values(
        self, v: str, known: Sequence[str], extra: Mapping[str, Any], path: str, where: str
    ) -> str:
        """CEL: the problems of the values of `v`'s keys that `known` does not list."""
        k, m = self.var(), self.var()
        inner = self.issues(f"{v}[{k}]", extra, f"{path} + {key_path(k)}", f"{where}.*")
        if inner == "[]":
            return "[]"
        return (
            f"{v}.filter({k}, !({k} in {key_set(known)}))"
            f".map({k}, ({inner}).join('; ')).filter({m}, {m} != '')"
        )

    def closed(self, v: str, known: Sequence[str], path: str, body: str, what: str = "") -> str:
        """CEL: unknown keys of object `v` (only `known` allowed), else `body`; bounded."""
        k = self.var()
        unknown = (
            f"{v}.filter({k}, !({k} in {key_set(known)}))"
            f".map({k}, {path} + {key_path(k)} + {lit(': unknown field' + what)})"
        )
        too_many = (
            f"[{path} + ': has ' + string(size({v})) + "
            f"{lit(' fields; only these are known' + what + ': ' + ', '.join(known))}]"
        )
        return f"size({v}) > {len(known)} ? {too_many} : {concat([unknown, body])}"


_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
DESTINATION_HINT = "must be a network with a prefix length, e.g. 10.20.0.0/16 or 0.0.0.0/0"
GATEWAY_HINT = "must be an address without a prefix length, e.g. 10.20.0.1 or fe80::1"


def _cidr_checks(v: str) -> list[tuple[str, str]]:
    """(condition, reason): what dradriver.contract.iprules' rule 1 refuses of a string
    Kubernetes' isCIDR accepts (canonical spelling, never a special range, not the
    network, subnet-router or IPv4 broadcast address of its own prefix)."""
    c = f"cidr({v})"
    # (isCIDR already refuses IPv4-mapped IPv6, and cidr() will not even parse that range)
    specials = lit([str(net) for net, _ in iprules.NEVER if net != _MAPPED])
    wide = f"({c}.ip().family() == 4 ? {c}.prefixLength() <= 30 : {c}.prefixLength() <= 126)"
    # CEL's IP library has no broadcast address: the host part of the IPv4 address, as an
    # integer from the (canonical, by then) dotted quad, must not be all ones.
    quad = f"{v}.split('/')[0]"
    broadcast = (
        f"{c}.ip().family() == 4 && {c}.prefixLength() <= 30 && "
        f"{is_last(quad, c + '.prefixLength()')}"
    )
    return [
        (f"string({c}) != {v}", "must be written in canonical form (lower-case, shortest)"),
        (f"{c}.prefixLength() == 0", "a prefix length of 0 would make every address on-link"),
        (
            f"{specials}.exists(r, cidr(r).containsIP({c}.ip()))",
            "is not a unicast host address (unspecified, loopback, link-local, multicast, "
            "reserved or IPv4-mapped)",
        ),
        (
            f"{wide} && {c}.masked().ip() == {c}.ip()",
            "is the network (subnet-router) address of its own prefix",
        ),
        (broadcast, "is the broadcast address of its own prefix"),
    ]


def is_last(quad: str, prefix: str) -> str:
    """CEL: whether dotted quad `quad` (canonical) is the last address (all host bits
    set) of a network of prefix length `prefix`."""
    n = "int(o[0]) * 16777216 + int(o[1]) * 65536 + int(o[2]) * 256 + int(o[3])"
    host_size = f"{lit([2**k for k in range(33)])}[32 - {prefix}]"
    return f"[{quad}.split('.')].all(o, ({n} + 1) % {host_size} == 0)"


def _cidr(v: str, invalid: str) -> str:
    """CEL for the `cidr` format: Kubernetes' isCIDR, then iprules' rule 1."""
    body = "[]"
    for cond, reason in reversed(_cidr_checks(v)):
        body = f"{cond} ? [{invalid} + {lit(reason)}] : {body}"
    return f"!isCIDR({v}) ? [{invalid} + {lit(CIDR_HINT)}] : ({body})"


def _destination(v: str, invalid: str) -> str:
    """CEL for the `route-destination` format (dradriver.contract.iprules.parse_destination): a
    network in canonical form, host bits clear."""
    c = f"cidr({v})"
    return (
        f"!isCIDR({v}) ? [{invalid} + {lit(DESTINATION_HINT)}] : "
        f"string({c}) != {v} ? [{invalid} + {lit('must be written in canonical form')}] : "
        f"{c}.masked().ip() != {c}.ip() ? [{invalid} + {lit('has host bits set')}] : []"
    )


def _gateway(v: str, invalid: str) -> str:
    """CEL for the `route-gateway` format (dradriver.contract.iprules.parse_gateway): a unicast
    address in canonical form, link-local allowed."""
    a = f"ip({v})"
    return (
        f"!isIP({v}) ? [{invalid} + {lit(GATEWAY_HINT)}] : "
        f"string({a}) != {v} ? [{invalid} + {lit('must be written in canonical form')}] : "
        f"!({a}.isGlobalUnicast() || {a}.isLinkLocalUnicast()) ? "
        f"[{invalid} + {lit('is not a unicast address')}] : []"
    )


# The `format` values the translator checks, and how.
FORMATS = {"cidr": _cidr, "route-destination": _destination, "route-gateway": _gateway}
