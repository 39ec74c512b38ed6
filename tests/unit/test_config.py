"""The config schema: defaults, JSON paths in errors, and the invalid configs that
tests/support/configcases.py also runs through the admission policy."""

import datetime

import pytest
from jsonschema import Draft202012Validator

from dradriver.base.errors import ConfigError
from dradriver.contract import patterns
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import Device
from dradriver.contract.registry import HandlerRegistry
from tests.support.handlers import request, virtual_device

# Invalid configs, shared with the admission-policy tests (tests/support/configcases.py).
MANY_ERRORS = {
    "type": "netdev",
    "netdev": {
        "kind": "macvlan",
        "parent": "eth0",
        "mtu": 70000,
        "bogus": True,
        "ipAddresses": ["10.0.0.1"],
        "interfaceName": "lo",
    },
}
MANY_ERRORS_PATHS = [
    "$.netdev.bogus",
    "$.netdev.interfaceName",
    "$.netdev.ipAddresses[0]",
    "$.netdev.mtu",
]
MISSING_PARENT_BAD_MODE = {"type": "netdev", "netdev": {"kind": "macvlan", "mode": "shared"}}
UNKNOWN_KIND = {"type": "netdev", "netdev": {"kind": "tap"}}
BAD_INTERFACE_NAMES = ["", "a" * 16, "lo", ".", "..", "a b", "a/b", "a:b", "é", "net1\n"]
BAD_CIDR = {"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": ["10.1.2.3/40"]}}
BAD_CIDRS = [
    "10.0.0.1",
    "10.1.2.3/40",
    "fd00::1/129",
    "10.0.0.1/024",
    "10.0.0.1/255.255.255.0",
    "::ffff:10.0.0.1/104",
    "fe80::1%eth0/64",
    "10.0.0.256/24",
    "",
    "10.0.0.1/24 ",
    "0.0.0.0/0",  # issue 13: the unspecified address, a /0, reserved ranges
    "::/0",
    "::1.2.3.4/96",
    "FD00::A/64",  # not in canonical form
]


@pytest.fixture(scope="module")
def schema():
    return ConfigSchema(HandlerRegistry(), "dra.example.com")


def test_published_schema_is_a_valid_json_schema(schema):
    Draft202012Validator.check_schema(schema.schema)


@pytest.mark.parametrize(
    "params",
    [
        {"type": "netdev", "netdev": {"kind": "dummy", "interfaceName": "net1"}},
        {
            "type": "netdev",
            "netdev": {
                "kind": "macvlan",
                "interfaceName": "data0",
                "parent": "eth0",
                "mode": "bridge",
                "mtu": 1500,
            },
        },
        {"type": "netdev", "netdev": {"kind": "ipvlan", "parent": "eth0", "mode": "l3"}},
        {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "eth1", "mtu": 9000}},
    ],
)
def test_original_design_configs_are_accepted_unchanged(schema, params):
    assert schema.issues(params) == []


def test_no_config_gets_the_default_of_the_device(schema):
    resolved = schema.resolve(None, virtual_device("netdev-virtual"))
    assert (resolved.type, resolved.kind) == ("netdev", "veth")
    nic = Device("nic-eth1", {"type": "netdev", "kind": "host-device"})
    assert schema.resolve({}, nic).kind == "host-device"


def test_type_without_kind_takes_the_device_kind_when_types_agree(schema):
    assert (
        schema.resolve(
            {"type": "netdev", "netdev": {"mtu": 1400}}, virtual_device("netdev-virtual")
        ).kind
        == "veth"
    )


def test_errors_carry_json_paths_of_every_bad_field(schema):
    with pytest.raises(ConfigError) as err:
        schema.resolve(MANY_ERRORS, None)
    paths = [p for p, _ in err.value.issues]
    assert paths == MANY_ERRORS_PATHS
    assert "unknown field" in str(err.value)


def test_missing_parent_and_bad_mode(schema):
    issues = dict(schema.issues(MISSING_PARENT_BAD_MODE))
    assert "'parent' is a required property" in issues["$.netdev"]
    assert "is not one of" in issues["$.netdev.mode"]


def test_unknown_kind_lists_the_available_ones(schema):
    issues = dict(schema.issues(UNKNOWN_KIND))
    assert "veth" in issues["$.netdev.kind"] and "macvlan" in issues["$.netdev.kind"]


@pytest.mark.parametrize("name", BAD_INTERFACE_NAMES)
def test_bad_container_interface_names(schema, name):
    issues = dict(
        schema.issues({"type": "netdev", "netdev": {"kind": "veth", "interfaceName": name}})
    )
    assert "$.netdev.interfaceName" in issues


def test_good_cidrs_and_bad_ones(schema):
    ok = {
        "type": "netdev",
        "netdev": {"kind": "veth", "ipAddresses": ["10.1.2.3/24", "fd00::5/64"]},
    }
    assert schema.issues(ok) == []
    assert list(dict(schema.issues(BAD_CIDR))) == ["$.netdev.ipAddresses[0]"]


@pytest.mark.parametrize("cidr", BAD_CIDRS)
def test_cidrs_are_what_kubernetes_calls_cidrs(schema, cidr):
    """Prefix length in decimal without leading zeros; no netmask, zone or IPv4-mapped
    IPv6 (what Kubernetes' CEL isCIDR() refuses too, see the admission policy)."""
    bad = {"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": [cidr]}}
    assert list(dict(schema.issues(bad))) == ["$.netdev.ipAddresses[0]"]


@pytest.mark.parametrize("cidr", ["10.0.0.1/32", "fd00::1/128"])
def test_unusual_cidrs_the_driver_accepts(schema, cidr):
    ok = {"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": [cidr]}}
    assert schema.issues(ok) == []


@pytest.mark.parametrize("mtu", [1500.0, True, "1500", 2**63, None])
def test_integers_are_json_integers_of_64_bits(schema, mtu):
    """1500.0 is a JSON number, not an integer (the API server's CEL sees a double)."""
    bad = {"type": "netdev", "netdev": {"kind": "veth", "mtu": mtu}}
    assert "$.netdev.mtu" in dict(schema.issues(bad))


def test_dollar_is_the_end_of_the_string(schema):
    """Python's `$` also matches before a trailing newline; schema patterns do not."""
    bad = {"type": "netdev", "netdev": {"kind": "veth", "macAddress": "aa:bb:cc:dd:ee:ff\n"}}
    assert list(dict(schema.issues(bad))) == ["$.netdev.macAddress"]


def test_nested_objects_must_be_objects(schema):
    bad = {"type": "combo", "combo": {"kind": "roce", "rdma": "shared", "netdev": []}}
    assert sorted(dict(schema.issues(bad))) == ["$.combo.netdev", "$.combo.rdma"]


def test_parameters_must_be_an_object(schema):
    with pytest.raises(ConfigError, match="must be a JSON object"):
        schema.resolve(["netdev"], None)


@pytest.mark.parametrize(
    "name", ["eth1\n", "net%d", "a%", "all", "default", "\x00", "e\tx", "eth1 ", "é1", "ab\u200b"]
)
def test_names_the_kernel_would_refuse_or_rewrite_are_refused(schema, name):
    params = {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": name}}
    assert list(dict(schema.issues(params))) == ["$.netdev.interfaceName"]
    macvlan = {"type": "netdev", "netdev": {"kind": "macvlan", "parent": name}}
    assert list(dict(schema.issues(macvlan))) == ["$.netdev.parent"]


@pytest.mark.parametrize("name", ["eth1", "net-1", "a" * 15, "...", "default0", "lo0", "x@y"])
def test_names_the_kernel_keeps_as_given_are_accepted(schema, name):
    params = {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": name}}
    assert schema.issues(params) == []


@pytest.mark.parametrize(
    "address",
    ["fe80::1%eth0/64", "0.0.0.0/0", "224.0.0.1/32", "10.0.0.1/255.255.255.0", "10.0.0.1/24\n"],
)
def test_the_reviews_addresses_are_refused_with_one_reason_at_their_path(schema, address):
    params = {"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": ["10.0.0.2/24", address]}}
    issues = schema.issues(params)
    assert [p for p, _ in issues] == ["$.netdev.ipAddresses[1]"], issues


@pytest.mark.parametrize(
    "mac", ["01:00:5e:00:00:01", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00", "03:00:00:00:00:01"]
)
def test_group_and_zero_macs_are_refused_by_the_schema(schema, mac):
    issues = dict(schema.issues({"type": "netdev", "netdev": {"kind": "veth", "macAddress": mac}}))
    assert list(issues) == ["$.netdev.macAddress"] and "unicast" in issues["$.netdev.macAddress"]


def test_patterns_mean_what_json_schema_says():
    assert patterns.search("^a$", "a") and not patterns.search("^a$", "a\n")
    assert patterns.search("^[$]$", "$")  # a '$' in a class is a character
    assert patterns.search(r"^\$$", "$")
    assert not patterns.search(r"^\d$", "٣")  # \d is ASCII, as in ECMA-262 and RE2


def test_deep_big_and_odd_keyed_parameters_are_refused_before_validation(schema):
    deep: dict = {"kind": "veth"}
    for _ in range(2000):
        deep = {"x": deep}
    with pytest.raises(ConfigError, match="nested deeper than 16 levels") as err:
        schema.resolve({"type": "netdev", "netdev": deep}, None)
    assert err.value.path.startswith("$.netdev.x.x.x")
    with pytest.raises(ConfigError, match="more than 2000 values"):
        schema.resolve({"type": "netdev", "netdev": {"x": list(range(5000))}}, None)
    with pytest.raises(ConfigError, match="key 1 is not a string") as err:
        schema.resolve({"type": "netdev", "netdev": {1: "x"}}, None)
    assert err.value.path == "$.netdev"


def test_integers_are_json_integers_and_bools_are_not_numbers(schema):
    """As the API server (and so the admission policy) reads them: 1500.0 is a double."""
    resolved = schema.resolve({"type": "netdev", "netdev": {"kind": "veth", "mtu": 1500}}, None)
    assert resolved.config["mtu"] == 1500 and type(resolved.config["mtu"]) is int
    for bad in (True, 1500.0, 1500.5, "1500", float("inf"), float("nan"), 10**30, -1):
        params = {"type": "netdev", "netdev": {"kind": "veth", "mtu": bad}}
        assert list(dict(schema.issues(params))) == ["$.netdev.mtu"], bad


def test_error_messages_stay_short(schema):
    params = {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "x" * 100000}}
    [(path, message)] = schema.issues(params)
    assert path == "$.netdev.interfaceName" and len(message) <= 300


def test_ipv6_addresses_need_an_mtu_of_1280():
    """Checked on the node, where the MTU a link inherits is known too (a class may set
    the MTU and the claim the addresses)."""
    netdev = {"kind": "veth", "mtu": 1279, "ipAddresses": ["198.51.100.7/24", "2001:db8::7/64"]}
    handler, req = request({"type": "netdev", "netdev": netdev})
    with pytest.raises(ConfigError) as err:
        handler.validate(req)
    assert [path for path, _ in err.value.issues] == ["$.netdev.ipAddresses[1]"]
    assert "IPv6 needs an MTU of at least 1280" in str(err.value)


def test_a_wrong_type_is_named_once_at_its_own_path(schema):
    netdev = {"kind": "veth", "mtu": "1000", "ipAddresses": ["2001:db8::7/64"]}
    assert list(dict(schema.issues({"type": "netdev", "netdev": netdev}))) == ["$.netdev.mtu"]


def test_a_config_is_validated_once_and_told_apart_from_a_lookalike(monkeypatch):
    """Claims of one template carry one config: its validation result is remembered, by
    its exact JSON (1500 and 1500.0 are different configs, one good and one bad)."""
    schema = ConfigSchema(HandlerRegistry(), "dra.example.com")
    validations = []
    real = schema._validate
    monkeypatch.setattr(schema, "_validate", lambda p: validations.append(p) or real(p))
    good = {"type": "netdev", "netdev": {"kind": "veth", "mtu": 1500}}
    lookalike = {"type": "netdev", "netdev": {"mtu": 1500.0, "kind": "veth"}}
    for _ in range(3):
        assert schema.issues(good) == []
        assert "$.netdev.mtu" in dict(schema.issues(lookalike))
    assert len(validations) == 2
    issues = schema.issues(lookalike)
    issues.clear()  # a caller changing its copy does not change the remembered result
    assert schema.issues(lookalike) != []


def test_a_config_json_cannot_spell_is_validated_as_it_is_never_remembered():
    """YAML gives `validate-config` dates and integer keys, which JSON cannot keep: such
    a config is judged as it is (an answer, never a traceback, nor another config's
    verdict)."""
    schema = ConfigSchema(HandlerRegistry(), "dra.example.com")
    dated = {"type": "netdev", "netdev": {"kind": datetime.date(2001, 12, 14)}}
    assert "$.netdev.kind" in dict(schema.issues(dated))
    numbered = {"type": "netdev", "netdev": {"kind": "veth", 1: "x"}}
    assert schema.issues(numbered) != []
    assert schema.issues({"type": "netdev", "netdev": {"kind": "veth", "1": "x"}}) != []
