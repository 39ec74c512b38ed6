import copy

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


def _nics(count: int, unhealthy: int = 0) -> list[Device]:
    return [
        Device(f"nic-{i:03d}", {"kind": "host-device"}, healthy=i >= unhealthy, health_message="")
        for i in range(count)
    ]


def test_an_unhealthy_device_carries_the_drivers_taint_with_the_chosen_effect():
    for effect in ("NoSchedule", "NoExecute"):
        [s] = slices.build_slices("dra.example.com", "n1", "u1", _nics(3, 1), 0, effect)
        taints = {d["name"]: d.get("taints") for d in s["spec"]["devices"]}
        assert taints == {
            "nic-000": [{"key": "dra.example.com/unhealthy", "effect": effect}],
            "nic-001": None,
            "nic-002": None,
        }
    [s] = slices.build_slices("dra.example.com", "n1", "u1", _nics(3, 1), 0, None)
    assert not any("taints" in d for d in s["spec"]["devices"])  # None: no taints


def test_slices_hold_64_devices_once_one_is_tainted():
    healthy = slices.build_slices("d.example.com", "n1", "u1", _nics(200), 0, "NoSchedule")
    assert [len(s["spec"]["devices"]) for s in healthy] == [128, 72]
    tainted = slices.build_slices("d.example.com", "n1", "u1", _nics(200, 1), 0, "NoSchedule")
    assert [len(s["spec"]["devices"]) for s in tainted] == [64, 64, 64, 8]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in tainted} == {4}


def test_a_taint_the_server_stamped_is_unchanged_content_and_a_dropped_one_is_seen():
    [sent] = slices.build_slices("dra.example.com", "n1", "u1", _nics(2, 1), 0, "NoSchedule")
    stored = copy.deepcopy(sent)
    stored["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-11-27T07:00:00Z"
    assert slices.content(stored) == slices.content(sent)
    assert slices.dropped_taints(sent["spec"]["devices"], stored) == []
    del stored["spec"]["devices"][0]["taints"]
    assert slices.dropped_taints(sent["spec"]["devices"], stored) == ["nic-000"]


class _Discovery:
    """A registry whose discovery finds what the test says."""

    def __init__(self) -> None:
        self.found: list[Device] = []

    def discover(self, context: object) -> list[Device]:
        return list(self.found)


def test_a_device_a_claim_holds_stays_published_as_last_found_when_discovery_loses_it():
    from dradriver.apiserver.inventory import Inventory

    registry = _Discovery()
    asked: list[set[str]] = []

    def held(names):
        asked.append(set(names))
        return {"nic-held"} & set(names)

    inventory = Inventory(registry, context(), held)  # type: ignore[arg-type]
    registry.found = [Device("nic-held", {"mtu": 9000}), Device("nic-free", {})]
    assert [d.name for d in inventory.refresh()] == ["nic-held", "nic-free"]
    assert asked == []  # nothing went away: the records are not read
    registry.found = []  # both moved out of sight (a pod's namespace, unplugged)
    kept = inventory.refresh()
    assert [(d.name, d.attributes) for d in kept] == [("nic-held", {"mtu": 9000})]
    assert asked == [{"nic-held", "nic-free"}]
    assert [d.name for d in inventory.refresh()] == ["nic-held"]  # still held: still kept
    assert asked == [{"nic-held", "nic-free"}]  # known held: the records are not read again
    registry.found = [Device("nic-held", {"mtu": 1500})]  # back: its claim released
    assert [d.attributes for d in inventory.refresh()] == [{"mtu": 1500}]
    registry.found = []
    inventory.refresh()
    assert asked[-1] == {"nic-held"}  # gone again: asked again


def test_a_republished_taint_keeps_the_time_the_server_stamped():
    [stored] = slices.build_slices("dra.example.com", "n1", "u1", _nics(2, 1), 0, "NoSchedule")
    stored["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-11-27T07:00:00Z"
    [again] = slices.build_slices("dra.example.com", "n1", "u1", _nics(2, 1), 0, "NoSchedule")
    slices.keep_taint_times([again], [stored])
    assert again["spec"]["devices"][0]["taints"][0]["timeAdded"] == "2026-11-27T07:00:00Z"
    [other] = slices.build_slices("dra.example.com", "n1", "u1", _nics(2, 1), 0, "NoExecute")
    slices.keep_taint_times([other], [stored])  # another effect: a new taint, a new time
    assert "timeAdded" not in other["spec"]["devices"][0]["taints"][0]
