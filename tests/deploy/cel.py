"""A small evaluator for the CEL subset our DeviceClass selectors use, with CEL semantics.

Supported: string/int/bool literals, lists, `device.driver`,
`device.attributes["<domain>"].<name>` (and `["<name>"]`), `has(...)` on such a
selection, `==`, `!=`, `in`, `!`, `&&`, `||`, parentheses.

Semantics follow cel-go as the Kubernetes scheduler runs it:
- `device.attributes["<domain>"]` for a domain the device has no attribute of is an empty
  map; selecting a missing attribute from it is an evaluation error (which aborts the
  allocation in the scheduler), and `has()` of it is false.
- `&&` and `||` are commutative and absorb errors: `false && <error>` is false,
  `true || <error>` is true; otherwise an error propagates.
- `==` between different types is an error only where cel-go's type checker would
  reject it; at run time on dynamic values it is false (heterogeneous equality).

A device is given in resource.k8s.io/v1 JSON form (as `dra-driver discover` prints it):
`{"name", "attributes": {qualified name: {"string"|"int"|"bool"|"version": value}}}`.
Attribute names without a domain belong to the driver's domain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class CelError(Exception):
    """An evaluation error (what the scheduler reports as a CEL runtime error)."""


class CelSyntaxError(Exception):
    """The expression is outside the supported subset or malformed."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<int>\d+)
    | (?P<op>&&|\|\||==|!=|[()\[\],.!])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CelSyntaxError(f"unexpected input at {pos}: {text[pos : pos + 20]!r}")
        pos = m.end()
        if m.group("str") is not None:
            raw = m.group("str")[1:-1]
            out.append(("lit", re.sub(r"\\(.)", r"\1", raw)))
        elif m.group("int") is not None:
            out.append(("lit", int(m.group("int"))))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            name = m.group("name")
            if name in ("true", "false"):
                out.append(("lit", name == "true"))
            elif name == "in":
                out.append(("op", "in"))
            else:
                out.append(("name", name))
    return out


@dataclass
class _Device:
    driver: str
    attributes: dict[str, dict[str, Any]]  # domain -> name -> value


def device_view(driver: str, device: Mapping[str, Any]) -> _Device:
    """The CEL view of one v1 device JSON object published by `driver`."""
    domains: dict[str, dict[str, Any]] = {}
    for qualified, typed in (device.get("attributes") or {}).items():
        domain, _, name = qualified.rpartition("/")
        if len(typed) != 1:
            raise ValueError(f"attribute {qualified} must have exactly one value: {typed}")
        ((kind, value),) = typed.items()
        if kind not in ("string", "int", "bool", "version"):
            raise ValueError(f"attribute {qualified} has unknown value type {kind}")
        domains.setdefault(domain or driver, {})[name] = value
    return _Device(driver, domains)


class _Parser:
    """Recursive descent: or > and > not > relation (==, !=, in) > primary."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, kind: str, value: Any = None) -> Any:
        tok = self.peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            raise CelSyntaxError(f"expected {value or kind}, got {tok}")
        self.i += 1
        return tok[1]

    def accept(self, value: str) -> bool:
        tok = self.peek()
        if tok and tok[0] == "op" and tok[1] == value:
            self.i += 1
            return True
        return False

    def parse(self) -> tuple[Any, ...]:
        node = self.or_()
        if self.peek() is not None:
            raise CelSyntaxError(f"trailing input: {self.toks[self.i :]}")
        return node

    def or_(self) -> tuple[Any, ...]:
        node = self.and_()
        while self.accept("||"):
            node = ("or", node, self.and_())
        return node

    def and_(self) -> tuple[Any, ...]:
        node = self.not_()
        while self.accept("&&"):
            node = ("and", node, self.not_())
        return node

    def not_(self) -> tuple[Any, ...]:
        if self.accept("!"):
            return ("not", self.not_())
        return self.relation()

    def relation(self) -> tuple[Any, ...]:
        left = self.primary()
        for op in ("==", "!=", "in"):
            if self.accept(op):
                return (op, left, self.primary())
        return left

    def primary(self) -> tuple[Any, ...]:
        tok = self.peek()
        if tok is None:
            raise CelSyntaxError("unexpected end of expression")
        if tok == ("op", "("):
            self.i += 1
            node = self.or_()
            self.take("op", ")")
            return node
        if tok == ("op", "["):
            self.i += 1
            items: list[tuple[Any, ...]] = []
            if not self.accept("]"):
                items.append(self.primary())
                while self.accept(","):
                    items.append(self.primary())
                self.take("op", "]")
            return ("list", items)
        if tok[0] == "lit":
            self.i += 1
            return ("lit", tok[1])
        if tok == ("name", "has"):
            self.i += 1
            self.take("op", "(")
            sel = self.selection()
            self.take("op", ")")
            if sel[0] != "attr":
                raise CelSyntaxError("has() needs device.attributes[<domain>].<name>")
            return ("has", sel)
        if tok == ("name", "device"):
            return self.selection()
        raise CelSyntaxError(f"unsupported token {tok}")

    def selection(self) -> tuple[Any, ...]:
        self.take("name", "device")
        self.take("op", ".")
        field = self.take("name")
        if field == "driver":
            return ("driver",)
        if field != "attributes":
            raise CelSyntaxError(f"unsupported device field {field}")
        self.take("op", "[")
        domain = self.take("lit")
        self.take("op", "]")
        if self.accept("."):
            name = self.take("name")
        else:
            self.take("op", "[")
            name = self.take("lit")
            self.take("op", "]")
        return ("attr", domain, name)


def _eval(node: tuple[Any, ...], dev: _Device) -> Any:
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "list":
        return [_eval(n, dev) for n in node[1]]
    if op == "driver":
        return dev.driver
    if op == "attr":
        attrs = dev.attributes.get(node[1], {})
        if node[2] not in attrs:
            raise CelError(f"no such key: {node[2]} (domain {node[1]})")
        return attrs[node[2]]
    if op == "has":
        return node[1][2] in dev.attributes.get(node[1][1], {})
    if op == "not":
        value = _eval(node[1], dev)
        if not isinstance(value, bool):
            raise CelError(f"no matching overload for !{type(value).__name__}")
        return not value
    if op in ("and", "or"):
        results = []
        for sub in node[1:]:
            try:
                value = _eval(sub, dev)
                if not isinstance(value, bool):
                    raise CelError(f"no matching overload for {op} on {type(value).__name__}")
                results.append(value)
            except CelError as exc:
                results.append(exc)
        short = op == "or"  # the value that decides regardless of errors
        if short in results:
            return short
        errors = [r for r in results if isinstance(r, CelError)]
        if errors:
            raise errors[0]
        return not short
    if op in ("==", "!="):
        left, right = _eval(node[1], dev), _eval(node[2], dev)
        equal = type(left) is type(right) and left == right
        return equal if op == "==" else not equal
    if op == "in":
        left, right = _eval(node[1], dev), _eval(node[2], dev)
        if not isinstance(right, list):
            raise CelError("'in' needs a list")
        return any(type(left) is type(r) and left == r for r in right)
    raise CelSyntaxError(f"unknown node {op}")


def compile_expr(text: str) -> tuple[Any, ...]:
    """Parse `text`; raise CelSyntaxError outside the supported subset."""
    return _Parser(text).parse()


def evaluate(text: str, driver: str, device: Mapping[str, Any]) -> bool:
    """The value of selector `text` for `device` of `driver`; raise CelError on errors."""
    value = _eval(compile_expr(text), device_view(driver, device))
    if not isinstance(value, bool):
        raise CelError(f"selector result is {type(value).__name__}, not bool")
    return value
