"""host-device: an existing host interface the operator offers, handed whole to the pod.

Which interface is decided by the allocation (a `nic-*` device this driver published
from the operator's allow-list), never by a free-form name in the claim: `hostDevice`
in a config is accepted (the original design had it) but must name the allocated one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.base.errors import ConfigError, DeviceError
from dradriver.contract import naming
from dradriver.contract.hookspecs import Device, DeviceRequest, HandlerContext, Prepared, Validated
from dradriver.kit import hostif, links, netconfig, shaping, sysfs

KIND = "host-device"


def discover(context: HandlerContext) -> list[Device]:
    """Every allowed interface as a `nic-<name>` device."""
    if not context.parent_interfaces:
        return []  # nothing is offered unless the operator lists interfaces
    fs = sysfs.Sysfs(context.sysfs_root)
    primary = hostif.primary_interfaces()
    # A netdev behind an RDMA device is offered through that device (roce-devices) only,
    # so one NIC can never be allocated twice, once plain and once with its RDMA half.
    behind_rdma = {fs.rdma_netdev(ibdev) for ibdev in fs.rdma_devices()}
    devices = []
    for ifname in fs.net_interfaces():
        if hostif.refusal(context, ifname, primary) is not None:
            continue
        if fs.physfn(ifname) or ifname in behind_rdma:
            continue  # VFs are published by sriov-vf, RDMA netdevs by the rdma plugin
        attrs: dict[str, Any] = {"type": "netdev", "kind": KIND, "interfaceName": ifname}
        pci = fs.pci_address(ifname)
        for name, value in (
            ("macAddress", fs.read("class", "net", ifname, "address")),
            ("mtu", fs.read_int("class", "net", ifname, "mtu")),
            ("pciAddress", pci),
            ("numaNode", fs.numa_node(ifname)),
            ("driver", fs.kernel_driver(ifname)),
            ("linkSpeedMbps", fs.link_speed(ifname)),
        ):
            if value is not None:
                attrs[name] = value
        if pci:
            attrs.update(sysfs.pci_attributes(fs, pci, context.multus_resource_name))
        carrier = fs.read("class", "net", ifname, "carrier")
        vfs = fs.active_vfs(ifname)
        problem = _has_vfs(ifname, vfs) if vfs else "no carrier" if carrier == "0" else ""
        devices.append(
            Device(
                naming.published_device_name("nic", ifname),
                attrs,
                # the claim has the whole link: a bandwidth request picks one that fast
                capacity=shaping.link_capacity(context, ifname, attrs.get("linkSpeedMbps")),
                healthy=not problem,
                health_message=problem,
            )
        )
    return devices


def _has_vfs(ifname: str, vfs: int) -> str:
    """Why a PF with VFs is not handed to a pod."""
    return (
        f"{ifname} is an SR-IOV PF with {vfs} VFs: in a pod's namespace it would take their "
        "port with it; offer its VFs instead (--sriov-pfs) or set its sriov_numvfs to 0"
    )


class HostDeviceHandler:
    """Hands the allocated host interface to the container."""

    type = "netdev"
    kinds = (KIND,)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields plus hostDevice (must name the allocated interface)."""
        return netconfig.schema({"hostDevice": netconfig.PARENT}, keeps_addresses=True)

    def _ifname(self, req: DeviceRequest) -> str:
        device = req.published
        if device is None or device.kind != KIND:
            raise ConfigError(
                f"kind host-device needs a host interface device (nic-*), but the allocated "
                f"device {req.device} is {device.kind if device else 'unknown'}; request the "
                "network-devices class",
                f"{netconfig.NETDEV_PATH}.kind",
            )
        ifname = str(device.attributes["interfaceName"])
        wanted = req.config.get("hostDevice")
        if wanted is not None and wanted != ifname:
            raise ConfigError(
                f"hostDevice {wanted} is not the allocated interface "
                f"{ifname} (device {req.device})",
                f"{netconfig.NETDEV_PATH}.hostDevice",
            )
        reason = hostif.refusal(req.context, ifname, hostif.primary_interfaces())
        if reason is not None:
            raise DeviceError(f"interface {ifname} cannot be handed to a pod: {reason}")
        if vfs := sysfs.Sysfs(req.context.sysfs_root).active_vfs(ifname):
            raise DeviceError(
                f"interface {ifname} cannot be handed to a pod: {_has_vfs(ifname, vfs)}"
            )
        return ifname

    def validate(self, req: DeviceRequest) -> Validated:
        """Allocated device is an allowed host interface; config names no other one;
        MTU and addresses fit the interface and the node."""
        return hostif.checked(req, self._ifname(req)).validated()

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Journal the interface's state, set it down, apply MTU/MAC/addresses."""
        ifname = self._ifname(req)
        cfg = netconfig.NetConfig.parse(req.config)
        undo, network_data = hostif.claim(req.journal, ifname, cfg, on_host=links.on_host(req))
        return Prepared(
            edits=links.net_devices_edit(ifname, cfg.interface_name),
            undo=undo.to_json(),
            network_data=network_data,
            pod_interfaces=(netconfig.pod_interface(ifname, cfg, network_data.ips, returns=True),),
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Rename back and restore the interface once it is on the host again."""
        hostif.release(hostif.ClaimedInterface.from_json(undo))
