"""Valid opaque configs changed a little, for property tests: a value set to one seen in
that field elsewhere, to an edge value of the schema (enum members, bounds, lengths) or
to junk; a string twisted; a key removed or added; a list or object grown or emptied.

Changes near valid configs reach the checks that need the rest of the config to be right
(an interface's addresses against its routes, a kind's own fields) far more often than
configs made from nothing.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from tests.faults import fuzzing
from tests.support import configcases, schemacorpus

Draw = Callable[[st.SearchStrategy[Any]], Any]
JUNK = st.one_of(
    st.sampled_from([*schemacorpus.GENERIC, *schemacorpus.STRINGS]),
    st.sampled_from([*schemacorpus.CIDRS, *fuzzing.FORM_BAD_ADDRESSES, "10.0.0.1", "fe80::1"]),
    st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 1e300, -0.0, "\n", "net1\n"]),
    st.sampled_from([configcases.network_text("bridge"), configcases.network_text("evil")]),
    fuzzing.JSON,
)
NAMES = ["bogus", "", "é", "net.ipv4.conf.eth1.forwarding", "net.ipv6.conf.lo.x"]
TWISTS = [str.upper, "{}\n".format, "{}0".format, "0{}".format]


def mutants(
    valid: Sequence[Any], schema: Mapping[str, Any], corpus: Sequence[Any]
) -> st.SearchStrategy[Any]:
    """One of `valid` (a copy) changed one to three times, with values of `schema`'s
    edges and of the same fields in `corpus`."""
    seen = _seen(corpus)
    values = st.one_of(st.sampled_from(list({repr(v): v for v in _edges(schema)}.values())), JUNK)
    names = st.one_of(
        st.sampled_from(sorted(set(_names(schema)))), st.sampled_from(NAMES), st.text(max_size=8)
    )

    @st.composite
    def mutant(draw: Draw) -> Any:
        config = copy.deepcopy(draw(st.sampled_from(valid)))
        for _ in range(draw(st.integers(1, 3))):
            _mutate(draw, config, lambda field: _value(draw, field, seen, values), names)
        return config

    return mutant()


def _edges(schema: Any) -> Iterator[Any]:
    """Values at the edges of what `schema` allows: enum members, bounds, lengths."""
    if isinstance(schema, list):
        for sub in schema:
            yield from _edges(sub)
    if not isinstance(schema, dict):
        return
    yield from schema.get("enum", [])
    for keyword in ("minimum", "maximum"):
        if keyword in schema:
            n = schema[keyword]
            yield from (n - 1, n, n + 1, float(n), str(n))
    if "maxLength" in schema:
        yield from ("a" * schema["maxLength"], "a" * (schema["maxLength"] + 1))
    for value in schema.values():
        yield from _edges(value)


def _names(schema: Any) -> Iterator[str]:
    if isinstance(schema, list):
        for sub in schema:
            yield from _names(sub)
    elif isinstance(schema, dict):
        yield from schema.get("properties", {})
        for value in schema.values():
            yield from _names(value)


def _seen(configs: Sequence[Any]) -> dict[str, list[Any]]:
    """Every value under each key name in `configs`, and (`name[]`) each item of a list."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    stack = list(configs)
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for name, value in item.items():
                out[name].setdefault(repr(value), value)
                for each in value if isinstance(value, list) else ():
                    out[f"{name}[]"].setdefault(repr(each), each)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return {name: list(values.values()) for name, values in out.items()}


def _value(
    draw: Draw, name: str, seen: Mapping[str, list[Any]], values: st.SearchStrategy[Any]
) -> Any:
    """A value for a field called `name`: one seen there, or any (a copy: it may change)."""
    if name in seen and draw(st.booleans()):
        return copy.deepcopy(draw(st.sampled_from(seen[name])))
    return copy.deepcopy(draw(values))


def _containers(value: Any) -> list[tuple[Any, str]]:
    """Every object and list in `value`, with the name of the field holding it."""
    out, stack = [], [(value, "")]
    while stack:
        item, name = stack.pop()
        if isinstance(item, dict):
            out.append((item, name))
            stack.extend((v, k) for k, v in item.items())
        elif isinstance(item, list):
            out.append((item, name))
            stack.extend((v, f"{name}[]") for v in item)
    return out


def _mutate(
    draw: Draw, config: Any, value: Callable[[str], Any], names: st.SearchStrategy[str]
) -> None:
    """Change one thing in `config`."""
    where, name = draw(st.sampled_from(_containers(config)))
    keys = list(where) if isinstance(where, dict) else list(range(len(where)))
    how = draw(st.sampled_from(["set", "set", "twist", "remove", "add", "grow", "empty"]))
    if how == "add" or not keys:
        if isinstance(where, dict):
            field = draw(names)
            where[field] = value(field)
        else:
            where.append(value(f"{name}[]"))
        return
    key = draw(st.sampled_from(keys))
    if how == "set":
        where[key] = value(key if isinstance(key, str) else f"{name}[]")
    elif how == "twist" and isinstance(where[key], str):
        where[key] = draw(st.sampled_from(TWISTS))(where[key])
    elif how == "remove":
        del where[key]
    elif how == "grow" and isinstance(where[key], list) and where[key]:
        where[key].extend(copy.deepcopy(where[key]) * draw(st.sampled_from([1, 16, 32])))
    elif how == "grow" and isinstance(where[key], dict):
        where[key].update({f"k{i}": i for i in range(draw(st.sampled_from([1, 33])))})
    elif how == "empty" and isinstance(where[key], list | dict):
        where[key].clear()
