"""Which MACs a macvlan claim may set: locally administered ones, or those the operator
lists with --macvlan-global-macs (dradriver/contract/macs.py), alike in the schema check
at prepare and in `dra-driver validate-config`."""

from __future__ import annotations

import pytest

from dradriver.base.errors import ConfigError
from dradriver.contract import macs, patterns
from dradriver.contract.config import ConfigSchema
from dradriver.contract.registry import HandlerRegistry
from tests.support.handlers import virtual_device

GLOBAL = "00:1b:21:aa:bb:cc"  # a NIC vendor's (Intel) block: a burned-in address


def _macvlan(mac: str) -> dict[str, object]:
    netdev = {"kind": "macvlan", "parent": "eth0", "interfaceName": "net1", "macAddress": mac}
    return {"type": "netdev", "netdev": netdev}


def _refusal(schema: ConfigSchema, mac: str) -> str | None:
    try:
        schema.resolve(_macvlan(mac), virtual_device())
    except ConfigError as exc:
        return str(exc)
    return None


def test_without_a_list_only_locally_administered_macs_are_taken():
    schema = ConfigSchema(HandlerRegistry(), "dra.example.com")
    assert _refusal(schema, "02:00:00:00:00:01") is None
    refused = _refusal(schema, GLOBAL)
    assert refused is not None and "$.netdev.macAddress" in refused
    assert "or one the operator allows (--macvlan-global-macs)" in refused


def test_a_listed_global_mac_is_taken_in_any_case_and_no_other():
    schema = ConfigSchema(HandlerRegistry(), "dra.example.com", [GLOBAL.upper(), GLOBAL])
    for mac in (GLOBAL, GLOBAL.upper(), "00:1B:21:aa:BB:cc", "0a:00:00:00:00:01"):
        assert _refusal(schema, mac) is None, mac
    for mac in ("00:1b:21:aa:bb:cd", GLOBAL + ":00", "x" + GLOBAL, GLOBAL[:-1]):
        refused = _refusal(schema, mac)
        assert refused is not None and "$.netdev.macAddress" in refused, mac
    # The list widens a macvlan's MAC only: a veth's rule (any unicast) is its own.
    assert macs.local_or([GLOBAL]) == (f"^(?:{macs.LOCAL_MAC_PATTERN[1:-1]}|(?i:{GLOBAL}))$")
    assert patterns.problems(macs.local_or([GLOBAL, "00:50:56:00:00:01"])) == []


@pytest.mark.parametrize(
    "entry",
    ["01:00:5e:00:00:01", "00:00:00:00:00:00", "00:1b:21:aa:bb", "eth0", "00-1b-21-aa-bb-cc"],
)
def test_entries_that_are_no_unicast_mac_are_refused_naming_the_entry(entry):
    with pytest.raises(ValueError, match=f"'{entry}' is not a unicast Ethernet address"):
        macs.allowed_global([GLOBAL, entry])
    with pytest.raises(ValueError, match="not a unicast"):
        ConfigSchema(HandlerRegistry(), "dra.example.com", [entry])


def test_the_list_is_lower_case_once_each():
    assert macs.allowed_global([" 00:1B:21:AA:BB:CC", GLOBAL, "02:00:00:00:00:01"]) == (
        GLOBAL,
        "02:00:00:00:00:01",
    )
    assert macs.local_or([]) == macs.LOCAL_MAC_PATTERN
