"""Traffic-control messages (struct tcmsg, linux/pkt_sched.h, linux/pkt_cls.h). Pure.

Two requests limit one link's rate, the way the CNI bandwidth plugin does it:
- a token-bucket filter (tbf) as the link's root qdisc limits what it sends;
- an ingress qdisc and a match-all u32 filter whose mirred action redirects what the link
  receives to an ifb link, whose own root tbf then limits it.
The rate goes to the kernel in bytes per second, with the link layer given as Ethernet so
that the kernel needs no rate table.
"""

from __future__ import annotations

import socket
import struct

from dradriver.kernel.rtnl import wire

RTM_NEWQDISC, RTM_NEWTFILTER = 36, 44
TCA_KIND, TCA_OPTIONS = 1, 2
TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1
INGRESS_HANDLE = 0xFFFF0000  # ffff:, the ingress qdisc's handle and its filters' parent
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_BURST = 1, 4, 6
TC_LINKLAYER_ETHERNET = 1
TCA_U32_SEL, TCA_U32_ACT = 5, 7
TC_U32_TERMINAL = 1
TCA_ACT_KIND, TCA_ACT_OPTIONS = 1, 2
TCA_MIRRED_PARMS = 2
TC_ACT_STOLEN = 4
TCA_EGRESS_REDIR = 1
ETH_P_ALL = 0x0003

TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_RATESPEC = struct.Struct("=BBHhHI")  # cell_log, linklayer, overhead, cell_align, mpu, rate
_TBF_TAIL = struct.Struct("=III")  # limit, buffer (ticks), mtu (ticks)
_U32_SEL = struct.Struct("=BBBxHHhhI")  # flags, offshift, nkeys, offmask, off, offoff, hoff,
# hmask; then nkeys of struct tc_u32_key
_U32_KEY = struct.Struct("=IIii")  # mask, val, off, offmask
_MIRRED = struct.Struct("=IIiiiiI")  # index, capab, action, refcnt, bindcnt, eaction, ifindex
_U64 = struct.Struct("=Q")

LATENCY = 0.025  # seconds a packet may wait in the bucket's queue before it is dropped
BURST_TIME = 0.005  # seconds of traffic the bucket lets through at once...
MIN_BURST = 64 * 1024  # ...but never less than a GSO segment
_NS_PER_TICK = 64  # PSCHED_SHIFT: the kernel's scheduler tick is 64 ns
_CREATE = wire.NLM_F_REQUEST | wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL


def tcmsg(index: int, handle: int, parent: int, info: int = 0) -> bytes:
    """The header of a qdisc or filter request on the link with `index`."""
    return TCMSG.pack(0, index, handle, parent, info)


def burst(rate: int) -> int:
    """Bytes the bucket holds for `rate` bits per second (at most what a u32 holds)."""
    return min(0xFFFFFFFF, max(MIN_BURST, int(rate / 8 * BURST_TIME)))


def tbf(index: int, rate: int) -> wire.Request:
    """RTM_NEWQDISC: a tbf root qdisc sending at most `rate` bits per second."""
    rate_bytes = rate // 8
    size = burst(rate)
    spec = _RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, -1, 0, min(rate_bytes, 0xFFFFFFFF))
    ticks = min(0xFFFFFFFF, int(size / rate_bytes * 1e9) // _NS_PER_TICK)
    limit = min(0xFFFFFFFF, int(rate_bytes * LATENCY) + size)
    parms = spec + _RATESPEC.pack(0, 0, 0, 0, 0, 0) + _TBF_TAIL.pack(limit, ticks, 0)
    options = [wire.attr(TCA_TBF_PARMS, parms), wire.attr_u32(TCA_TBF_BURST, size)]
    if rate_bytes >= 1 << 32:
        options.append(wire.attr(TCA_TBF_RATE64, _U64.pack(rate_bytes)))
    body = tcmsg(index, 0x10000, TC_H_ROOT)  # handle 1:
    body += wire.attr_str(TCA_KIND, "tbf") + wire.nest(TCA_OPTIONS, *options)
    return RTM_NEWQDISC, _CREATE, body


def ingress(index: int) -> wire.Request:
    """RTM_NEWQDISC: the ingress qdisc, where filters see what the link receives."""
    body = tcmsg(index, INGRESS_HANDLE, TC_H_INGRESS) + wire.attr_str(TCA_KIND, "ingress")
    return RTM_NEWQDISC, _CREATE, body


def redirect(index: int, target: int) -> wire.Request:
    """RTM_NEWTFILTER: every packet the link receives goes out of link `target` instead
    (u32 matching all, mirred egress redirect)."""
    selector = _U32_SEL.pack(TC_U32_TERMINAL, 0, 1, 0, 0, 0, 0, 0) + _U32_KEY.pack(0, 0, 0, 0)
    mirred = _MIRRED.pack(0, 0, TC_ACT_STOLEN, 0, 0, TCA_EGRESS_REDIR, target)
    action = wire.nest(
        1,
        wire.attr_str(TCA_ACT_KIND, "mirred"),
        wire.nest(TCA_ACT_OPTIONS, wire.attr(TCA_MIRRED_PARMS, mirred)),
    )
    options = wire.nest(
        TCA_OPTIONS, wire.attr(TCA_U32_SEL, selector), wire.nest(TCA_U32_ACT, action)
    )
    info = 1 << 16 | socket.htons(ETH_P_ALL)  # priority 1, every protocol
    body = tcmsg(index, 0, INGRESS_HANDLE, info) + wire.attr_str(TCA_KIND, "u32") + options
    return RTM_NEWTFILTER, _CREATE, body
