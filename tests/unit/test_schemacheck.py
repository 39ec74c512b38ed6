"""dradriver.contract.schemacheck against jsonschema, the validator it replaced (kept as the
reference in tests/support/jsonschemaref.py, with the same keywords and formats).

On the real assembled schema (as the tests build it, and as the daemon does with its
global MACs and CNI plugins), for the corpus of the config tests and the admission policy
and for hypothesis' mutations of valid configs, the two find the same errors (keyword,
message, path, the value and schema judged, a refused key) and the driver reports the same
issues: a config one accepts, the other accepts. Then the schemas it refuses to build,
and the keywords the real schema does not use (yet), on a small schema.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dradriver.base.errors import ConfigError, RegistryError
from dradriver.contract import schemaassertions, validation
from dradriver.contract.config import ConfigSchema, shape_problem
from dradriver.contract.hookspecs import hookimpl
from dradriver.contract.registry import HandlerRegistry
from dradriver.contract.schemacheck import ANNOTATIONS, SchemaError, SchemaIssue, Validator
from dradriver.settings import DEFAULT_CNI_PLUGINS, split_list
from tests.faults import fuzzing
from tests.support import configcases, configmutations, jsonschemaref
from tests.support.schemacorpus import address_sweep, field_corpus
from tests.unit import test_config as unit

DRIVER = "dra.example.com"
SCHEMAS = {
    "tests": ConfigSchema(HandlerRegistry(), DRIVER).schema,
    "daemon": ConfigSchema(
        HandlerRegistry(), DRIVER, ["00:1b:21:00:00:01"], split_list(DEFAULT_CNI_PLUGINS)
    ).schema,
}
OURS = {name: validation.validator(s) for name, s in SCHEMAS.items()}
REFERENCE = {name: jsonschemaref.validator(s) for name, s in SCHEMAS.items()}
FUZZ = fuzzing.fuzz(300)  # DRA_FUZZ_EXAMPLES makes it more
# Keywords that never report an error of their own: they apply subschemas.
APPLICATORS = {"properties", "allOf", "if", "then", "items", "propertyNames"}


def nd(**netdev: Any) -> dict[str, Any]:
    return {"type": "netdev", "netdev": netdev}


# What the corpus below would otherwise not reach: a refused sysctl name, too many sysctls,
# a CNI plugin the daemon does not allow.
EXTRA = [
    nd(kind="veth", sysctls={"net.ipv4.conf.eth1.rp_filter": 1, "kernel.panic": 1, "": 0}),
    nd(kind="veth", sysctls={f"net.ipv4.conf.eth1.k{i}": i for i in range(40)}),
    {"type": "cni", "cni": {"config": configcases.network_text("bridge", "evil", "tuning")}},
    {"type": "cni", "cni": {"kind": "network", "config": configcases.network_text("evil")}},
]


def _parameters(obj: Any) -> Iterator[Any]:
    """The opaque parameters in a claim, template or class."""
    if isinstance(obj, dict):
        if "parameters" in (obj.get("opaque") or {}):
            yield obj["opaque"]["parameters"]
        for value in obj.values():
            yield from _parameters(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _parameters(value)


class _Filling(ConfigSchema):
    """A schema that keeps the parameters `resolve` validates: with the defaults filled."""

    def issues(self, parameters: object) -> list[tuple[str, str]]:
        self.filled.append(parameters)
        return []


def _with_defaults(configs: list[Any]) -> list[Any]:
    """`configs` as the driver validates them: type and kind filled where they default."""
    schema = _Filling(HandlerRegistry(), DRIVER)
    schema.filled = []
    for params in configs:
        with contextlib.suppress(ConfigError, LookupError, TypeError):  # what issues refuses
            schema.resolve(params, None)
    return schema.filled


def _corpus() -> list[Any]:
    """The configs of the config tests, of the admission policy's tests and examples."""
    out = [unit.MANY_ERRORS, unit.MISSING_PARENT_BAD_MODE, unit.UNKNOWN_KIND, unit.BAD_CIDR]
    out += [nd(kind="veth", interfaceName=name) for name in unit.BAD_INTERFACE_NAMES]
    out += [nd(kind="veth", ipAddresses=[cidr]) for cidr in unit.BAD_CIDRS]
    for case in configcases.cases():
        for params in [*case.configs, *(case.class_configs or ())]:
            out.append({k: v for k, v in params.items() if k != "requests"})
    out += [p for example in configcases.examples() for p in _parameters(example.obj)]
    out += EXTRA
    return [*out, *_with_defaults(out)]


CORPUS = _corpus()
# The admission policy's corpus: every field of every kind with edge and wrong values.
FIELDS = [*field_corpus(SCHEMAS["tests"]), *address_sweep()]


_TEXTS: dict[int, tuple[Any, str]] = {}  # id -> (schema, its text): schemas live on


def _signature(issue: SchemaIssue) -> tuple[Any, ...]:
    schema = issue.schema
    if not isinstance(schema, bool):
        schema = _TEXTS.setdefault(id(schema), (schema, repr(schema)))[1]
    cause = None if issue.cause is None else str(issue.cause)
    context = frozenset(Counter(map(_signature, issue.context)).items())
    fields = (issue.keyword, issue.path, issue.message, issue.key, cause, schema, context)
    return (*fields, id(issue.instance))


def disagreement(ours: Validator, reference: Any, instance: object) -> str | None:
    """How our validator and jsonschema's differ on `instance` (None: they agree)."""
    if shape_problem(instance) is not None:
        return None  # refused before any validation
    errors = list(reference.iter_errors(instance))
    mine = Counter(map(_signature, ours.iter_errors(instance)))
    theirs = Counter(_signature(jsonschemaref.as_issue(e)) for e in errors)
    if mine != theirs:
        ours_only, theirs_only = mine - theirs, theirs - mine
        return f"{instance!r}: only ours: {list(ours_only)}; only jsonschema's: {list(theirs_only)}"
    got, want = validation.issues(ours, instance), jsonschemaref.issues_of(errors)
    return None if got == want else f"{instance!r}: issues {got} != {want}"


@pytest.mark.parametrize("name", SCHEMAS)
def test_the_corpus_gets_jsonschemas_verdicts_and_errors(name: str) -> None:
    corpus = [*CORPUS, *FIELDS] if name == "daemon" else CORPUS
    differ = [d for x in corpus if (d := disagreement(OURS[name], REFERENCE[name], x))]
    assert not differ, f"{len(differ)} of {len(corpus)} differ, first: {differ[0]}"


def test_the_corpus_is_not_vacuous() -> None:
    """Many accepted and refused configs, every keyword that can refuse one does, and a
    property name is refused as a key."""
    ours, corpus = OURS["daemon"], [x for x in [*CORPUS, *FIELDS] if shape_problem(x) is None]
    errors = [e for x in corpus for e in ours.iter_errors(x)]
    refused = sum(1 for x in corpus if not ours.is_valid(x))
    assert refused >= 1000 and len(corpus) - refused >= 100
    reported = {e.keyword for e in errors}
    assert _reported(SCHEMAS["daemon"]) <= reported, _reported(SCHEMAS["daemon"]) - reported
    assert any(e.key for e in errors), "a refused property name"


def _reported(schema: Any) -> set[str]:
    """The keywords of `schema` that report errors of their own (none below `if` or `not`
    does: those subschemas only decide)."""
    if not isinstance(schema, dict):
        return set()
    subs = [*schema.get("properties", {}).values(), *schema.get("allOf", [])]
    subs += [
        schema[k] for k in ("then", "items", "additionalProperties", "propertyNames") if k in schema
    ]
    return (set(schema) - ANNOTATIONS - APPLICATORS).union(*map(_reported, subs))


@pytest.mark.parametrize(
    "change",
    ["a lenient cidr format", "interfaceRules silenced", "another maxLength message"],
)
def test_a_validator_that_differs_is_caught(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: a changed format, keyword or message shows."""
    formats, keywords = dict(validation.FORMATS), dict(validation.KEYWORDS)
    if change == "a lenient cidr format":
        formats["cidr"] = ipaddress.ip_interface
    elif change == "interfaceRules silenced":
        keywords["interfaceRules"] = lambda value, instance, schema: ()
    else:
        monkeypatch.setitem(schemaassertions.ASSERTIONS, "maxLength", _too_long)
    changed = Validator(SCHEMAS["daemon"], keywords, formats)
    assert any(disagreement(changed, REFERENCE["daemon"], x) for x in [*CORPUS, *FIELDS])


def _too_long(most: int) -> Callable[[Any], str | None]:
    return lambda x: f"{x!r} is long" if isinstance(x, str) and len(x) > most else None


# ---------------------------------------------------------------- mutations, fuzzed configs

VALID = [x for x in [*CORPUS, *FIELDS] if shape_problem(x) is None and OURS["daemon"].is_valid(x)]
MUTANTS = configmutations.mutants(VALID, SCHEMAS["daemon"], [*CORPUS, *FIELDS])


@FUZZ
@given(MUTANTS)
def test_mutated_valid_configs_get_jsonschemas_verdicts_and_errors(config: Any) -> None:
    for name in SCHEMAS:
        assert disagreement(OURS[name], REFERENCE[name], config) is None


@FUZZ
@given(fuzzing.netdev_case(max_depth=40))
def test_fuzzed_netdev_configs_get_jsonschemas_verdicts_and_errors(case: fuzzing.Case) -> None:
    assert disagreement(OURS["daemon"], REFERENCE["daemon"], case.parameters) is None


def test_the_running_driver_loads_no_jsonschema() -> None:
    """The daemon and its handlers, refusing a config: none of jsonschema's packages."""
    code = (
        "import sys\n"
        "import dradriver.cli, dradriver.daemon\n"
        "from dradriver.contract.config import ConfigSchema\n"
        "from dradriver.contract.registry import HandlerRegistry\n"
        "schema = ConfigSchema(HandlerRegistry(), 'dra.example.com', (), ('bridge',))\n"
        "assert schema.issues({'type': 'netdev', 'netdev': {'kind': 'veth', 'mtu': 0}})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))\n"
    )
    packages = ["jsonschema", "jsonschema_specifications", "referencing", "rpds", "attrs"]
    res = subprocess.run(
        [sys.executable, "-c", code, *packages], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


# ---------------------------------------------------------------- what it refuses to build


@pytest.mark.parametrize(
    "schema,problem",
    [
        ({"anyOf": [{"type": "string"}]}, "#/anyOf: unknown keyword 'anyOf'"),
        ({"properties": {"a": {"$ref": "#/$defs/a"}}}, "#/properties/a/$ref: unknown keyword"),
        ({"properties": {"a": {"maxLenght": 3}}}, "unknown keyword 'maxLenght'"),
        ({"patternProperties": {"^a": {}}}, "unknown keyword 'patternProperties'"),
        ({"format": "ipv4"}, "#/format: unknown format 'ipv4' (known: cidr, route-"),
        ({"then": {"type": "string"}}, "#/then: then without if is never applied"),
        ({"maxLength": -1}, "#/maxLength: must be a non-negative integer"),
        ({"type": "str"}, "#/type: 'str' is not a type"),
        ({"pattern": "a("}, "#/pattern: 'a(' is not a regular expression"),
        ({"allOf": []}, "#/allOf: must be a non-empty list of schemas"),
        ({"items": 3}, "#/items: a schema is an object or a boolean, not 3"),
        ({"$schema": "http://json-schema.org/draft-07/schema#"}, "is not https://json-schema"),
    ],
)
def test_a_schema_it_cannot_check_in_full_is_refused(schema: Any, problem: str) -> None:
    with pytest.raises(SchemaError) as caught:
        Validator(schema, validation.KEYWORDS, validation.FORMATS)
    assert problem in str(caught.value)


class _Handler:
    type, kinds = "fpga", ("bitstream",)

    def schema(self, kind: str) -> dict[str, Any]:
        return {"properties": {"mode": {"anyOf": [{"const": "a"}, {"const": "b"}]}}}


class _Plugin:
    @hookimpl
    def dradriver_handlers(self) -> list[_Handler]:
        return [_Handler()]


def test_a_plugin_schema_it_cannot_check_stops_the_driver_naming_where() -> None:
    registry = HandlerRegistry({"fpga": _Plugin()}, entry_points=False)
    with pytest.raises(
        RegistryError, match=r"#/properties/fpga/allOf/0/then/properties/mode/anyOf"
    ):
        ConfigSchema(registry, DRIVER)


# ---------------------------------------------------------------- keywords the schema lacks

SMALL = {
    "type": "object",
    "required": ["a"],
    "additionalProperties": True,
    "properties": {
        "a": {"oneOf": [{"type": "integer", "minimum": 0}, {"maximum": 10}, {"const": "x"}]},
        "b": {"type": ["string", "null"], "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
        "c": {"items": False, "maxItems": 0},
        "d": {"items": {"enum": [1, True, "1", None, [1], {"k": 1}]}, "uniqueItems": True},
        "e": {"not": {"type": "string"}, "if": {"type": "integer"}, "then": {"maximum": 5},
              "else": {"const": [1, 2]}},
        "f": {"properties": {"x": True}, "additionalProperties": {"type": "boolean"},
              "maxProperties": 1, "propertyNames": {"maxLength": 1, "minLength": 1}},
        "g": {"format": "cidr", "maxLength": 0},
        "h": {"oneOf": [{"type": "array"}, {"maxItems": 1}]},
        "i": {"propertyNames": False, "allOf": [True, {"items": True}]},
        "j": {"minItems": 1, "exclusiveMinimum": 0, "exclusiveMaximum": 10},
        "k": {"minItems": 2, "minProperties": 2, "description": "x", "contentMediaType": "x"},
        "l": {"minProperties": 1, "exclusiveMinimum": 1.0},
    },
}  # fmt: skip
SMALL_VALUES = st.one_of(
    st.sampled_from([0, 1, 5, 6, 10, 11, -1, 1.0, True, False, None, "x", "", "ab", "abcde"]),
    st.sampled_from(["A", "10.0.0.2/24", "10.0.0.1", [], [1], [1, 1.0], [True, 1], [[1], [True]]]),
    st.sampled_from([{"k": 1}, [{"k": 1}, {"k": True}], [1, 2], {"x": 1, "y": 2, "zz": "t"}]),
    fuzzing.JSON,
)


@FUZZ
@given(st.dictionaries(st.sampled_from("abcdefghijklz"), SMALL_VALUES, max_size=6))
def test_a_small_schema_with_the_other_keywords_gets_jsonschemas_errors(instance: Any) -> None:
    ours = Validator(SMALL, validation.KEYWORDS, validation.FORMATS)
    assert disagreement(ours, jsonschemaref.validator(SMALL), instance) is None


def test_a_false_schema_names_the_value_it_refuses_where_jsonschema_names_its_parent() -> None:
    """The one difference found: jsonschema reports a false subschema's error without the
    key or index that led to it (no schema of the driver has one)."""
    schema = {"properties": {"a": {"properties": {"old": False}}}}
    [ours] = Validator(schema).iter_errors({"a": {"old": 1}})
    [theirs] = jsonschemaref.validator(schema).iter_errors({"a": {"old": 1}})
    assert (ours.path, ours.message) == (("a", "old"), "False schema does not allow 1")
    assert (tuple(theirs.absolute_path), theirs.message) == (("a",), ours.message)
