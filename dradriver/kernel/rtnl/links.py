"""Link messages (struct ifinfomsg, linux/if_link.h, veth.h): requests and their parsing.

This is the one place where the driver's names for link settings become the kernel's
numbers: `create` takes `mode` as a name per kind (macvlan private/vepa/bridge/passthru/
source, ipvlan l2/l3/l3s, ipoib datagram/connected). Pure, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Literal

from dradriver.kernel.objects import CreateAttrs, Link, LinkAttrs, VfSettings
from dradriver.kernel.rtnl import wire

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
IFF_UP = 1

# IFLA_* (enum in linux/if_link.h)
IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_LINK = 5
IFLA_MASTER = 10
IFLA_LINKINFO = 18
IFLA_IFALIAS = 20
IFLA_VFINFO_LIST = 22
IFLA_NET_NS_FD = 28
IFLA_EXT_MASK = 29
IFLA_MIN_MTU = 50
IFLA_MAX_MTU = 51
IFLA_PERM_ADDRESS = 54
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
VETH_INFO_PEER = 1
IFLA_MACVLAN_MODE = 1  # u32
IFLA_IPVLAN_MODE = 1  # u16
IFLA_IPOIB_PKEY, IFLA_IPOIB_MODE = 1, 2  # u16 each
IFLA_VF_INFO = 1
IFLA_VF_MAC, IFLA_VF_VLAN, IFLA_VF_SPOOFCHK, IFLA_VF_TRUST = 1, 2, 4, 9
IFLA_VF_LINK_STATE, IFLA_VF_RATE = 5, 6
VF_LINK_STATES = {"auto": 0, "enable": 1, "disable": 2}  # IFLA_VF_LINK_STATE_*

# IFLA_EXT_MASK bits (RTEXT_FILTER_* in linux/rtnetlink.h)
RTEXT_FILTER_VF = 1 << 0
RTEXT_FILTER_SKIP_STATS = 1 << 3

# Config names -> kernel values (MACVLAN_MODE_*, IPVLAN_MODE_*, IPOIB_MODE_*).
MACVLAN_MODES = {"private": 1, "vepa": 2, "bridge": 4, "passthru": 8, "source": 16}
IPVLAN_MODES = {"l2": 0, "l3": 1, "l3s": 2}
IPOIB_MODES = {"datagram": 0, "connected": 1}

IFINFO = struct.Struct("=BxHiII")  # struct ifinfomsg: family, type, index, flags, change
_VF_MAC = struct.Struct("=I32s")  # struct ifla_vf_mac: vf, mac[MAX_ADDR_LEN]
_VF_VLAN = struct.Struct("=III")  # struct ifla_vf_vlan: vf, vlan, qos
_VF_SETTING = struct.Struct("=II")  # struct ifla_vf_spoofchk, _trust, _link_state: vf, value
_VF_RATE = struct.Struct("=III")  # struct ifla_vf_rate: vf, min_tx_rate, max_tx_rate (Mb/s)
VF_UNSET = 2**32 - 1  # what a PF reports for a VF setting its driver does not support

_CREATE = wire.NLM_F_REQUEST | wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL
_CHANGE = wire.NLM_F_REQUEST | wire.NLM_F_ACK
_GET = wire.NLM_F_REQUEST
_DUMP = wire.NLM_F_REQUEST | wire.NLM_F_DUMP

_DATA = {"veth": {"peer"}, "macvlan": {"mode"}, "ipvlan": {"mode"}, "ipoib": {"pkey", "mode"}}


def ifinfo(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    """A struct ifinfomsg (family AF_UNSPEC)."""
    return IFINFO.pack(0, 0, index, flags, change)


def get(name: str | None = None, index: int = 0, vfs: bool = False) -> wire.Request:
    """RTM_GETLINK of one link, by name or index (with its VFs if `vfs`)."""
    mask = RTEXT_FILTER_SKIP_STATS | (RTEXT_FILTER_VF if vfs else 0)
    body = ifinfo(index) + wire.attr_u32(IFLA_EXT_MASK, mask)
    if name is not None:
        body += wire.attr_str(IFLA_IFNAME, name)
    return RTM_GETLINK, _GET, body


def dump() -> wire.Request:
    """RTM_GETLINK of every link of the namespace."""
    return RTM_GETLINK, _DUMP, ifinfo() + wire.attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)


def delete(name: str | None = None, index: int = 0) -> wire.Request:
    """RTM_DELLINK of the link called `name`, or of the one with this index."""
    body = ifinfo(index) + (wire.attr_str(IFLA_IFNAME, name) if name is not None else b"")
    return RTM_DELLINK, _CHANGE, body


def create(name: str, kind: str, attrs: CreateAttrs) -> wire.Request:
    """RTM_NEWLINK creating a down link of `kind` (attrs: see netlink.CreateAttrs)."""
    unknown = set(attrs) - {"link", "peer", "mode", "pkey"}
    if unknown:
        raise ValueError(f"unknown attributes for a new {kind} link: {sorted(unknown)}")
    body = ifinfo() + wire.attr_str(IFLA_IFNAME, name)
    if "link" in attrs:
        body += wire.attr_u32(IFLA_LINK, attrs["link"])
    info = wire.attr_str(IFLA_INFO_KIND, kind)
    data = _info_data(kind, attrs)
    if data:
        info += wire.nest(IFLA_INFO_DATA, *data)
    return RTM_NEWLINK, _CREATE, body + wire.nest(IFLA_LINKINFO, info)


def _info_data(kind: str, attrs: CreateAttrs) -> list[bytes]:
    """IFLA_INFO_DATA of one link kind."""
    wrong = set(attrs) - {"link"} - _DATA.get(kind, set())
    if wrong:
        raise ValueError(f"link kind {kind} takes no {sorted(wrong)}")
    out = []
    if "peer" in attrs:
        out.append(wire.attr(VETH_INFO_PEER, ifinfo() + wire.attr_str(IFLA_IFNAME, attrs["peer"])))
    if "mode" in attrs:
        mode = attrs["mode"]
        if kind == "macvlan":
            out.append(wire.attr_u32(IFLA_MACVLAN_MODE, _named(MACVLAN_MODES, kind, mode)))
        elif kind == "ipvlan":
            out.append(wire.attr_u16(IFLA_IPVLAN_MODE, _named(IPVLAN_MODES, kind, mode)))
        else:
            out.append(wire.attr_u16(IFLA_IPOIB_MODE, _named(IPOIB_MODES, kind, mode)))
    if "pkey" in attrs:
        out.insert(0, wire.attr_u16(IFLA_IPOIB_PKEY, attrs["pkey"]))
    return out


def _named(modes: Mapping[str, int], kind: str, mode: str) -> int:
    if mode not in modes:
        raise ValueError(f"{kind} mode {mode!r} is none of {', '.join(modes)}")
    return modes[mode]


def change(index: int, attrs: LinkAttrs) -> wire.Request:
    """RTM_NEWLINK changing one link (attrs: see netlink.LinkAttrs)."""
    keys = {"ifname", "mtu", "address", "ifalias", "state", "master", "net_ns_fd"}
    if set(attrs) - keys:
        raise ValueError(f"unknown link attributes: {sorted(set(attrs) - keys)}")
    flags = change_mask = 0
    if "state" in attrs:
        if attrs["state"] not in ("up", "down"):
            raise ValueError(f"link state {attrs['state']!r} is neither up nor down")
        flags, change_mask = (IFF_UP if attrs["state"] == "up" else 0), IFF_UP
    body = ifinfo(index, flags, change_mask)
    if "ifname" in attrs:
        body += wire.attr_str(IFLA_IFNAME, attrs["ifname"])
    if "mtu" in attrs:
        body += wire.attr_u32(IFLA_MTU, attrs["mtu"])
    if "address" in attrs:
        body += wire.attr(IFLA_ADDRESS, mac_bytes(attrs["address"]))
    if "ifalias" in attrs:  # no NUL, as iproute2 sends it; empty clears the alias
        body += wire.attr(IFLA_IFALIAS, attrs["ifalias"].encode())
    if "master" in attrs:
        body += wire.attr_u32(IFLA_MASTER, attrs["master"])
    if "net_ns_fd" in attrs:
        body += wire.attr_u32(IFLA_NET_NS_FD, attrs["net_ns_fd"])
    return RTM_NEWLINK, _CHANGE, body


def set_vf(pf_index: int, vf: int, settings: VfSettings) -> wire.Request:
    """RTM_NEWLINK on a PF setting the non-None settings of one of its VFs."""
    info = []
    if settings.mac is not None:
        info.append(wire.attr(IFLA_VF_MAC, _VF_MAC.pack(vf, mac_bytes(settings.mac))))
    if settings.vlan is not None:
        info.append(wire.attr(IFLA_VF_VLAN, _VF_VLAN.pack(vf, settings.vlan, settings.qos or 0)))
    if settings.link_state is not None:
        state = VF_LINK_STATES[settings.link_state]
        info.append(wire.attr(IFLA_VF_LINK_STATE, _VF_SETTING.pack(vf, state)))
    if settings.min_tx_rate is not None or settings.max_tx_rate is not None:
        rates = (settings.min_tx_rate or 0, settings.max_tx_rate or 0)
        info.append(wire.attr(IFLA_VF_RATE, _VF_RATE.pack(vf, *rates)))
    if settings.spoofchk is not None:
        info.append(wire.attr(IFLA_VF_SPOOFCHK, _VF_SETTING.pack(vf, int(settings.spoofchk))))
    if settings.trust is not None:
        info.append(wire.attr(IFLA_VF_TRUST, _VF_SETTING.pack(vf, int(settings.trust))))
    vfs = wire.nest(IFLA_VFINFO_LIST, wire.nest(IFLA_VF_INFO, *info))
    return RTM_NEWLINK, _CHANGE, ifinfo(pf_index) + vfs


def mac_bytes(mac: str) -> bytes:
    """aa:bb:cc:dd:ee:ff as bytes; ValueError if it is not hex pairs."""
    octets = mac.split(":")
    if not all(len(o) == 2 for o in octets):
        raise ValueError(f"{mac!r} is not a hardware address (hex pairs separated by ':')")
    return bytes.fromhex("".join(octets))


def mac_text(raw: bytes) -> str:
    """A hardware address as lower-case hex pairs separated by ':'."""
    return raw.hex(":")


def parse(body: bytes) -> Link:
    """The Link of one RTM_NEWLINK message body."""
    _, link_type, index, flags, _ = IFINFO.unpack_from(body)
    a = wire.attrs(body, IFINFO.size)
    kind = None
    if IFLA_LINKINFO in a:
        raw_kind = wire.attrs(a[IFLA_LINKINFO]).get(IFLA_INFO_KIND)
        kind = wire.string(raw_kind) if raw_kind is not None else None
    return Link(
        index=index,
        name=wire.string(a.get(IFLA_IFNAME, b"")),
        kind=kind,
        alias=wire.string(a[IFLA_IFALIAS]) if IFLA_IFALIAS in a else None,
        mtu=wire.u32(a[IFLA_MTU]) if IFLA_MTU in a else 0,
        address=mac_text(a[IFLA_ADDRESS]) if IFLA_ADDRESS in a else None,
        up=bool(flags & IFF_UP),
        link_type=link_type,
        min_mtu=wire.u32(a[IFLA_MIN_MTU]) if IFLA_MIN_MTU in a else 0,
        max_mtu=wire.u32(a[IFLA_MAX_MTU]) if IFLA_MAX_MTU in a else 0,
        permanent_address=_permanent(a.get(IFLA_PERM_ADDRESS)),
    )


def _permanent(raw: bytes | None) -> str | None:
    """The permanent hardware address, None where the kernel has none (all zeros)."""
    return mac_text(raw) if raw and any(raw) else None


def parse_vf(body: bytes, vf: int) -> VfSettings | None:
    """The settings of VF `vf` in a PF's RTM_NEWLINK (asked with RTEXT_FILTER_VF)."""
    a = wire.attrs(body, IFINFO.size)
    addr_len = len(a.get(IFLA_ADDRESS, b"")) or 6  # the PF's hardware address length
    for kind, info in wire.attr_list(a.get(IFLA_VFINFO_LIST, b"")):
        if kind != IFLA_VF_INFO:
            continue
        fields = wire.attrs(info)
        if IFLA_VF_MAC not in fields:
            continue
        number, mac = _VF_MAC.unpack_from(fields[IFLA_VF_MAC])
        if number != vf:
            continue
        _, vlan, qos = (
            _VF_VLAN.unpack_from(fields[IFLA_VF_VLAN]) if IFLA_VF_VLAN in fields else (0, 0, 0)
        )
        rates = _VF_RATE.unpack_from(fields[IFLA_VF_RATE])[1:] if IFLA_VF_RATE in fields else None
        state = (
            _VF_SETTING.unpack_from(fields[IFLA_VF_LINK_STATE])[1]
            if IFLA_VF_LINK_STATE in fields
            else None
        )
        return VfSettings(
            mac=mac_text(mac[:addr_len]),
            vlan=vlan,
            trust=_setting(fields.get(IFLA_VF_TRUST)),
            spoofchk=_setting(fields.get(IFLA_VF_SPOOFCHK)),
            qos=qos if IFLA_VF_VLAN in fields else None,
            link_state=_LINK_STATE_NAMES.get(state) if state is not None else None,
            min_tx_rate=rates[0] if rates else None,
            max_tx_rate=rates[1] if rates else None,
        )
    return None


_LINK_STATE_NAMES: dict[int, Literal["auto", "enable", "disable"]] = {
    0: "auto",
    1: "enable",
    2: "disable",
}


def _setting(payload: bytes | None) -> bool | None:
    """An ifla_vf_spoofchk/ifla_vf_trust setting; None when absent or unsupported."""
    if payload is None:
        return None
    value = _VF_SETTING.unpack_from(payload)[1]
    return None if value == VF_UNSET else bool(value)
