import pytest
from jsonschema import Draft202012Validator

from dradriver.config import ConfigSchema
from dradriver.errors import ConfigError
from dradriver.hookspecs import Device
from dradriver.registry import HandlerRegistry
from tests.support.handlers import virtual_device


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
        schema.resolve(
            {
                "type": "netdev",
                "netdev": {
                    "kind": "macvlan",
                    "parent": "eth0",
                    "mtu": 70000,
                    "bogus": True,
                    "ipAddresses": ["10.0.0.1"],
                    "interfaceName": "lo",
                },
            },
            None,
        )
    paths = [p for p, _ in err.value.issues]
    assert paths == [
        "$.netdev.bogus",
        "$.netdev.interfaceName",
        "$.netdev.ipAddresses[0]",
        "$.netdev.mtu",
    ]
    assert "unknown field" in str(err.value)


def test_missing_parent_and_bad_mode(schema):
    issues = dict(
        schema.issues({"type": "netdev", "netdev": {"kind": "macvlan", "mode": "shared"}})
    )
    assert "'parent' is a required property" in issues["$.netdev"]
    assert "is not one of" in issues["$.netdev.mode"]


def test_unknown_kind_lists_the_available_ones(schema):
    issues = dict(schema.issues({"type": "netdev", "netdev": {"kind": "tap"}}))
    assert "veth" in issues["$.netdev.kind"] and "macvlan" in issues["$.netdev.kind"]


@pytest.mark.parametrize("name", ["", "a" * 16, "lo", ".", "..", "a b", "a/b", "a:b", "é"])
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
    bad = {"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": ["10.1.2.3/40"]}}
    assert list(dict(schema.issues(bad))) == ["$.netdev.ipAddresses[0]"]


def test_parameters_must_be_an_object(schema):
    with pytest.raises(ConfigError, match="must be a JSON object"):
        schema.resolve(["netdev"], None)
