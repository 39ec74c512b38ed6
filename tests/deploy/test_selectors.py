"""DeviceClass selectors against the devices the driver publishes.

A claim must only land on a device whose handler can serve it. The selectors of
resourceclass.yaml are evaluated (tests/deploy/cel.py, CEL semantics for the subset
they use) against:

- REAL: `dra-driver discover -o json` output: this machine's /sys (virtual device), and
  fabricated sysfs trees (tests/support/fakesys.py) with host NICs, SR-IOV VFs and
  RDMA devices of both link layers, discovered by the real handlers;
- CONSTRUCTED: devices built here as hookspecs.Device with the attributes the
  handlers document, rendered by the driver's own slices.device_json (the fallback
  netdev-virtual-<n> devices too, and a device of another driver).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dradriver.handlers.netdev import virtual

from dradriver.apiserver import slices
from dradriver.contract.hookspecs import Device
from tests.deploy import cel
from tests.deploy.support import (
    CLASS_FILE,
    DRIVER,
    EXAMPLE_FILES,
    device_classes,
    discover,
    network_check,
    objects,
    selectors,
)
from tests.support.fakesys import FakeSys
from tests.support.handlers import context

# Which class must select a device, by the device's published kind (the handler that
# serves it). roce-devices additionally selects rdma devices with roce == true.
CLASS_OF_KIND = {
    "virtual": "virtual-network",
    "host-device": "network-devices",
    "sriov-vf": "network-devices",
    "uverbs": "rdma-devices",
}
CLASSES = ("network-devices", "virtual-network", "rdma-devices", "roce-devices")


def attr(device: dict, name: str):
    typed = device["attributes"].get(name)
    return next(iter(typed.values())) if typed else None


def matching_classes(device: dict, driver: str = DRIVER) -> set[str]:
    """Every class all of whose selectors accept `device` (errors fail the test)."""
    out = set()
    for name, device_class in device_classes().items():
        try:
            if all(cel.evaluate(expr, driver, device) for expr in selectors(device_class)):
                out.add(name)
        except cel.CelError as exc:
            pytest.fail(f"class {name} on device {device['name']}: evaluation error {exc}")
    return out


def expected_classes(device: dict) -> set[str]:
    want = {CLASS_OF_KIND[attr(device, "kind")]}
    if attr(device, "type") == "rdma" and attr(device, "roce") is True:
        want.add("roce-devices")
    return want


# --- devices --------------------------------------------------------------------------


def constructed_devices() -> list[dict]:
    """CONSTRUCTED: one device per published kind, rendered by slices.device_json."""
    devices = [
        Device(
            "nic-ens2f0",
            {
                "type": "netdev",
                "kind": "host-device",
                "interfaceName": "ens2f0",
                "macAddress": "0c:42:a1:00:00:01",
                "mtu": 9000,
                "pciAddress": "0000:3b:00.0",
                "numaNode": 0,
            },
        ),
        Device(
            "vf-0000-3b-00-2-abcdef",
            {
                "type": "netdev",
                "kind": "sriov-vf",
                "pfName": "ens2f0",
                "vfIndex": 0,
                "pciAddress": "0000:3b:00.2",
                "interfaceName": "ens2f0v0",
                "numaNode": 0,
            },
        ),
        Device(
            "rdma-mlx5-0-abcdef",
            {
                "type": "rdma",
                "kind": "uverbs",
                "rdmaDevice": "mlx5_0",
                "uverbs": "uverbs0",
                "roce": True,
                "nodeGUID": "0c42:a103:0065:3e2a",
                "linkLayer": "Ethernet",
                "netdev": "ens2f0",
            },
        ),
        Device(
            "rdma-mlx5-1-abcdef",
            {
                "type": "rdma",
                "kind": "uverbs",
                "rdmaDevice": "mlx5_1",
                "uverbs": "uverbs1",
                "roce": False,
                "nodeGUID": "0c42:a103:0065:3e2b",
                "linkLayer": "InfiniBand",
                "netdev": "",
            },
        ),
        *virtual.virtual_device(context(virtual_slots=128)),
        *slices.single_allocation(virtual.virtual_device(context(virtual_slots=2))),
    ]
    return [slices.device_json(d) for d in devices]


def fabricated_sysfs(root: Path) -> Path:
    """A node with every kind of hardware (names unlike any real interface here)."""
    fs = FakeSys(root)
    fs.nic("zznic0", "0000:3b:00.0", mac="02:00:00:00:00:10")
    fs.sriov("zzpf0", "0000:5e:00.0", {0: ("0000:5e:00.2", "zzvf0"), 1: ("0000:5e:00.3", None)})
    fs.nic("zzroce0", "0000:af:00.0", mac="02:00:00:00:00:20")
    fs.rdma("mlx5_0", pci="0000:af:00.0", uverbs=0, netdev="zzroce0")
    fs.nic("zzib0", "0000:d8:00.0", link_type=32)
    fs.rdma("mlx5_1", pci="0000:d8:00.0", uverbs=1, netdev="zzib0", link_layer="InfiniBand")
    return root


@pytest.fixture(scope="module")
def fabricated_devices(tmp_path_factory) -> list[dict]:
    """REAL discovery on a fabricated node: all allow-lists open."""
    root = fabricated_sysfs(tmp_path_factory.mktemp("sysfs"))
    return discover(
        "--sysfs-root",
        str(root),
        "--parent-interfaces",
        "zz*",
        "--sriov-pfs",
        "zzpf*",
        "--virtual-parents",
        "zz*",
    )


# --- tests ----------------------------------------------------------------------------


def test_every_selector_is_in_the_supported_subset():
    for name, device_class in device_classes().items():
        assert selectors(device_class), f"{name} has no selector"
        for expr in selectors(device_class):
            cel.compile_expr(expr)
            assert expr.lstrip().startswith(f'device.driver == "{DRIVER}"'), (
                f"{name}: check the driver first, or other drivers' devices make "
                "the attribute lookups fail"
            )


def test_real_discover_on_this_machine_publishes_the_virtual_device_for_virtual_network():
    """REAL: dra-driver discover with the default flags (no allow-list: virtual only)."""
    devices = discover()
    virtual = [d for d in devices if d["name"] == "netdev-virtual"]
    assert virtual, devices
    for device in devices:
        assert matching_classes(device) == expected_classes(device), device["name"]
    assert matching_classes(virtual[0]) == {"virtual-network"}


def test_real_discover_with_every_host_interface_allowed():
    """REAL: whatever this machine has, each device lands only in its handler's class."""
    for device in discover("--parent-interfaces", "*", "--sriov-pfs", "*"):
        assert matching_classes(device) == expected_classes(device), device


def test_real_discover_on_fabricated_hardware(fabricated_devices):
    """REAL discovery, fabricated sysfs: host NIC, VF, RoCE and InfiniBand RDMA."""
    kinds = {attr(d, "kind") for d in fabricated_devices}
    assert kinds >= {"virtual", "host-device", "sriov-vf", "uverbs"}, kinds
    roce = {
        attr(d, "rdmaDevice"): attr(d, "roce")
        for d in fabricated_devices
        if attr(d, "type") == "rdma"
    }
    assert roce == {"mlx5_0": True, "mlx5_1": False}
    for device in fabricated_devices:
        assert matching_classes(device) == expected_classes(device), device


@pytest.mark.parametrize("device", constructed_devices(), ids=lambda d: d["name"])
def test_constructed_devices_land_in_their_class(device):
    """CONSTRUCTED: attributes as the handlers document them, rendered by device_json."""
    assert matching_classes(device) == expected_classes(device)


def test_other_drivers_devices_match_no_class_and_raise_no_error():
    foreign = {
        "name": "gpu-0",
        "attributes": {"type": {"string": "rdma"}, "gpu.example.com/model": {"string": "x"}},
    }
    assert matching_classes(foreign, driver="gpu.example.com") == set()


def test_rdma_device_without_roce_attribute_is_no_roce_device():
    """has() guards roce: a missing attribute is false, not an allocation error."""
    device = slices.device_json(Device("rdma-x", {"type": "rdma", "kind": "uverbs"}))
    assert matching_classes(device) == {"rdma-devices"}


def _example_requests():
    for template in objects("ResourceClaimTemplate", EXAMPLE_FILES):
        for req in template["spec"]["spec"]["devices"]["requests"]:
            yield template["metadata"]["name"], req


@pytest.mark.parametrize("source", ["real", "constructed"])
def test_every_example_request_finds_a_device(source, fabricated_devices):
    """Each example claim's class (and capacity request) matches a published device:
    real = this machine's discover output plus the fabricated node's; constructed =
    the devices built above."""
    devices = [*discover(), *fabricated_devices] if source == "real" else constructed_devices()
    classes = device_classes()
    for template, req in _example_requests():
        exactly = req["exactly"]
        device_class = classes[exactly["deviceClassName"]]
        candidates = [
            d
            for d in devices
            if all(cel.evaluate(e, DRIVER, d) for e in selectors(device_class))
            and all(
                cel.evaluate(e["cel"]["expression"], DRIVER, d)
                for e in exactly.get("selectors") or []
            )
            and _capacity_fits(d, (exactly.get("capacity") or {}).get("requests") or {})
        ]
        assert candidates, f"{template}/{req['name']}: no {source} device fits"


def _capacity_fits(device: dict, requests: dict[str, str]) -> bool:
    """Requested capacities exist and the request policy accepts the amount (integers).

    In fallback mode (API server without DRAConsumableCapacity) the netdev-virtual-<n>
    devices have no capacity, but such an API server also drops `capacity` from claims.
    """
    for name, amount in requests.items():
        cap = (device.get("capacity") or {}).get(name)
        if cap is None or int(amount) > int(cap["value"]):
            return False
        valid = (cap.get("requestPolicy") or {}).get("validRange")
        if valid:
            low, step = int(valid["min"]), int(valid.get("step", 1))
            if int(amount) < low or (int(amount) - low) % step:
                return False
    return True


def test_virtual_examples_consume_one_slot():
    for template, req in _example_requests():
        if req["exactly"]["deviceClassName"] == "virtual-network":
            assert req["exactly"]["capacity"]["requests"] == {"slots": "1"}, template


def test_network_check_hardware_table_agrees_with_the_selectors(fabricated_devices):
    """deploy/network-check.py decides which examples a cluster can run with plain
    predicates; they must say what the CEL selectors say."""
    nc = network_check()
    assert set(nc.HARDWARE_CLASSES) | {"virtual-network"} == set(CLASSES)
    assert nc.CLASS_FILE == CLASS_FILE
    for device in [*constructed_devices(), *fabricated_devices]:
        plain = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
        for name, predicate in nc.HARDWARE_CLASSES.items():
            want = name in matching_classes(device)
            assert predicate(plain) == want, (name, device["name"])
