from dradriver.handlers.netdev import virtual

from dradriver.apiserver import slices
from dradriver.contract.hookspecs import Capacity, Device, Version
from tests.support.handlers import context


def _virtual(slots):
    return virtual.virtual_device(context(virtual_slots=slots))


def _build(devices, generation=1):
    return slices.build_slices("dra.example.com", "node-a", "uid-1", devices, generation)


def test_virtual_device_is_shareable_with_slots():
    [dev] = _virtual(128)
    body = slices.device_json(dev)
    assert body == {
        "name": "netdev-virtual",
        "attributes": {"kind": {"string": "virtual"}, "type": {"string": "netdev"}},
        "capacity": {
            "slots": {
                "value": "128",
                "requestPolicy": {"default": "1", "validRange": {"min": "1", "step": "1"}},
            }
        },
        "allowMultipleAllocations": True,
    }


def test_fallback_publishes_single_allocation_devices():
    devices = slices.single_allocation(_virtual(4))
    assert [d.name for d in devices] == [f"netdev-virtual-{i}" for i in range(4)]
    assert all(not d.allow_multiple_allocations and not d.capacity for d in devices)
    by_name = {d.name: d for d in _virtual(4)}
    assert all(slices.share_of(d.name, by_name) == d for d in devices)
    assert slices.share_of("netdev-virtualx", by_name) is None
    assert slices.share_of("netdev-virtual-4", by_name) is None


def test_empty_pool_still_publishes_one_slice_owned_by_the_node():
    [body] = _build([])
    assert body["spec"]["devices"] == [] and body["spec"]["nodeName"] == "node-a"
    assert body["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1", "controller": True}
    ]


def test_more_than_128_devices_split_into_one_pool():
    devices = [Device(f"d{i:03}", {"type": "netdev"}) for i in range(300)]
    built = _build(devices, 7)
    assert [len(s["spec"]["devices"]) for s in built] == [128, 128, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in built} == {3}
    assert {s["spec"]["pool"]["generation"] for s in built} == {7}
    assert len({s["metadata"]["name"] for s in built}) == 3


def test_attribute_types_and_limits():
    attrs = {"type": "netdev", "b": True, "i": 5}
    attrs |= {f"a{i:02}": i for i in range(40)}
    body = slices.device_json(Device("d", attrs, capacity={"c": Capacity("1")}))
    assert len(body["attributes"]) + len(body["capacity"]) == 32
    # The first attributes a handler lists are the ones kept.
    assert body["attributes"]["type"] == {"string": "netdev"}
    assert body["attributes"]["b"] == {"bool": True}
    assert body["attributes"]["i"] == {"int": 5}
    assert "a39" not in body["attributes"]


def test_string_values_are_cut_to_64_characters():
    body = slices.device_json(Device("d", {"s": "x" * 100, "v": Version("1.2.3")}))
    assert body["attributes"]["s"] == {"string": "x" * 64}
    assert body["attributes"]["v"] == {"version": "1.2.3"}


def test_content_ignores_generation_and_empty_fields_the_server_omits():
    [a] = _build([Device("d", {})], 1)
    [b] = _build([Device("d", {})], 2)
    del b["spec"]["devices"][0]["attributes"]
    assert slices.content(a) == slices.content(b)


def test_dropped_fields_are_detected():
    [sent] = _build(_virtual(8))
    stored = {
        "spec": {"devices": [{"name": "netdev-virtual", "capacity": {"slots": {"value": "8"}}}]}
    }
    assert slices.dropped_fields(sent["spec"]["devices"], stored) == [
        "netdev-virtual.allowMultipleAllocations",
        "netdev-virtual.capacity.slots.requestPolicy",
    ]
    assert slices.dropped_fields(sent["spec"]["devices"], sent) == []
