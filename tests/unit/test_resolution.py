import pytest

from dradriver.base.errors import ClaimError
from dradriver.claims import resolution
from dradriver.contract.hookspecs import ClaimRef
from tests.support.fakeapi import allocated_claim, opaque

DRIVER = "dra.example.com"


def _ref(claim):
    m = claim["metadata"]
    return ClaimRef(m["namespace"], m["name"], m["uid"])


def test_uid_mismatch_is_refused_as_replaced():
    claim = allocated_claim("c", [{"request": "nic", "pool": "n", "device": "d"}])
    ref = ClaimRef("default", "c", "00000000-0000-0000-0000-000000000000")
    with pytest.raises(ClaimError, match="replaced"):
        resolution.resolve(claim, ref, DRIVER)


def test_unallocated_claim_is_refused():
    claim = allocated_claim("c", [])
    del claim["status"]["allocation"]
    with pytest.raises(ClaimError, match="not allocated"):
        resolution.resolve(claim, _ref(claim), DRIVER)


def test_only_our_results_and_configs_count():
    claim = allocated_claim(
        "c",
        [
            {"request": "nic", "pool": "n", "device": "d"},
            {"request": "gpu", "pool": "n", "device": "g", "driver": "gpu.example.com"},
        ],
        config=[opaque({"type": "netdev"}), opaque({"x": 1}, driver="gpu.example.com")],
    )
    resolved = resolution.resolve(claim, _ref(claim), DRIVER)
    assert [d.request for d in resolved.devices] == ["nic"]
    assert resolved.devices[0].parameters == {"type": "netdev"}


def test_class_config_first_then_claim_config_later_wins_field_by_field():
    claim = allocated_claim(
        "c",
        [{"request": "nic", "pool": "n", "device": "d"}],
        config=[
            opaque({"type": "netdev", "netdev": {"kind": "macvlan", "mtu": 1400}}),
            opaque(
                {"type": "netdev", "netdev": {"kind": "veth", "mtu": 9000, "interfaceName": "x"}},
                source="FromClass",
            ),
        ],
    )
    merged = resolution.resolve(claim, _ref(claim), DRIVER).devices[0].parameters
    assert merged == {
        "type": "netdev",
        "netdev": {"kind": "macvlan", "mtu": 1400, "interfaceName": "x"},
    }


def test_request_scoped_configs_apply_only_to_their_requests_and_sub_requests():
    claim = allocated_claim(
        "c",
        [
            {"request": "a/fast", "pool": "n", "device": "d1"},
            {"request": "b", "pool": "n", "device": "d2"},
        ],
        config=[
            opaque({"netdev": {"mtu": 1}}, requests=["a"]),
            opaque({"netdev": {"mtu": 2}}, requests=["b"]),
            opaque({"netdev": {"mtu": 3}}, requests=["a/fast"]),
        ],
    )
    a, b = resolution.resolve(claim, _ref(claim), DRIVER).devices
    assert a.base_request == "a" and a.parameters == {"netdev": {"mtu": 3}}
    assert b.parameters == {"netdev": {"mtu": 2}}


def test_share_id_and_reserving_pods_are_kept():
    claim = allocated_claim(
        "c",
        [{"request": "nic", "pool": "n", "device": "netdev-virtual", "shareID": "abc"}],
        pods=["p1", "p2"],
    )
    resolved = resolution.resolve(claim, _ref(claim), DRIVER)
    assert resolved.devices[0].share_id == "abc"
    assert resolved.pod_uids == ("p1", "p2")


def test_admin_access_is_refused():
    claim = allocated_claim(
        "c", [{"request": "nic", "pool": "n", "device": "d", "adminAccess": True}]
    )
    with pytest.raises(ClaimError, match="adminAccess"):
        resolution.resolve(claim, _ref(claim), DRIVER)


def test_deep_merge():
    assert resolution.deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {
        "a": {"b": 1, "c": 3}
    }
    assert resolution.deep_merge({"a": [1]}, {"a": [2]}) == {"a": [2]}
    assert resolution.deep_merge(None, {"a": 1}) == {"a": 1}
