"""Every number and struct layout of dradriver/rtnl is the kernel's: compiled against the
UAPI headers (linux/{netlink,rtnetlink,if_link,if_addr,veth,if}.h and the traffic-control
ones) by the C compiler."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dradriver.kernel.rtnl import addresses, links, routes, tc, wire
from tests.support import hosttools

# C expression -> our value.
CONSTANTS = {
    "NLMSG_ERROR": wire.NLMSG_ERROR,
    "NLMSG_DONE": wire.NLMSG_DONE,
    "NLMSG_NOOP": wire.NLMSG_NOOP,
    "NLMSG_OVERRUN": wire.NLMSG_OVERRUN,
    "NLM_F_REQUEST": wire.NLM_F_REQUEST,
    "NLM_F_ACK": wire.NLM_F_ACK,
    "NLM_F_DUMP": wire.NLM_F_DUMP,
    "NLM_F_DUMP_INTR": wire.NLM_F_DUMP_INTR,
    "NLM_F_EXCL": wire.NLM_F_EXCL,
    "NLM_F_CREATE": wire.NLM_F_CREATE,
    "NLM_F_CAPPED": wire.NLM_F_CAPPED,
    "NLM_F_ACK_TLVS": wire.NLM_F_ACK_TLVS,
    "NLA_F_NESTED": wire.NLA_F_NESTED,
    "NLMSGERR_ATTR_MSG": wire.NLMSGERR_ATTR_MSG,
    "NETLINK_CAP_ACK": wire.NETLINK_CAP_ACK,
    "NETLINK_EXT_ACK": wire.NETLINK_EXT_ACK,
    "NETLINK_GET_STRICT_CHK": wire.NETLINK_GET_STRICT_CHK,
    "SOL_NETLINK": wire.SOL_NETLINK,
    "RTM_NEWLINK": links.RTM_NEWLINK,
    "RTM_DELLINK": links.RTM_DELLINK,
    "RTM_GETLINK": links.RTM_GETLINK,
    "IFF_UP": links.IFF_UP,
    "IFLA_ADDRESS": links.IFLA_ADDRESS,
    "IFLA_IFNAME": links.IFLA_IFNAME,
    "IFLA_MTU": links.IFLA_MTU,
    "IFLA_LINK": links.IFLA_LINK,
    "IFLA_MASTER": links.IFLA_MASTER,
    "IFLA_LINKINFO": links.IFLA_LINKINFO,
    "IFLA_IFALIAS": links.IFLA_IFALIAS,
    "IFLA_VFINFO_LIST": links.IFLA_VFINFO_LIST,
    "IFLA_NET_NS_FD": links.IFLA_NET_NS_FD,
    "IFLA_EXT_MASK": links.IFLA_EXT_MASK,
    "IFLA_MIN_MTU": links.IFLA_MIN_MTU,
    "IFLA_MAX_MTU": links.IFLA_MAX_MTU,
    "IFLA_INFO_KIND": links.IFLA_INFO_KIND,
    "IFLA_INFO_DATA": links.IFLA_INFO_DATA,
    "VETH_INFO_PEER": links.VETH_INFO_PEER,
    "IFLA_MACVLAN_MODE": links.IFLA_MACVLAN_MODE,
    "IFLA_IPVLAN_MODE": links.IFLA_IPVLAN_MODE,
    "IFLA_IPOIB_PKEY": links.IFLA_IPOIB_PKEY,
    "IFLA_IPOIB_MODE": links.IFLA_IPOIB_MODE,
    "MACVLAN_MODE_PRIVATE": links.MACVLAN_MODES["private"],
    "MACVLAN_MODE_VEPA": links.MACVLAN_MODES["vepa"],
    "MACVLAN_MODE_BRIDGE": links.MACVLAN_MODES["bridge"],
    "MACVLAN_MODE_PASSTHRU": links.MACVLAN_MODES["passthru"],
    "MACVLAN_MODE_SOURCE": links.MACVLAN_MODES["source"],
    "IPVLAN_MODE_L2": links.IPVLAN_MODES["l2"],
    "IPVLAN_MODE_L3": links.IPVLAN_MODES["l3"],
    "IPVLAN_MODE_L3S": links.IPVLAN_MODES["l3s"],
    "IPOIB_MODE_DATAGRAM": links.IPOIB_MODES["datagram"],
    "IPOIB_MODE_CONNECTED": links.IPOIB_MODES["connected"],
    "IFLA_VF_INFO": links.IFLA_VF_INFO,
    "IFLA_VF_MAC": links.IFLA_VF_MAC,
    "IFLA_VF_VLAN": links.IFLA_VF_VLAN,
    "IFLA_VF_SPOOFCHK": links.IFLA_VF_SPOOFCHK,
    "IFLA_VF_TRUST": links.IFLA_VF_TRUST,
    "RTEXT_FILTER_VF": links.RTEXT_FILTER_VF,
    "RTEXT_FILTER_SKIP_STATS": links.RTEXT_FILTER_SKIP_STATS,
    "RTM_NEWADDR": addresses.RTM_NEWADDR,
    "RTM_DELADDR": addresses.RTM_DELADDR,
    "RTM_GETADDR": addresses.RTM_GETADDR,
    "IFA_ADDRESS": addresses.IFA_ADDRESS,
    "IFA_LOCAL": addresses.IFA_LOCAL,
    "RT_SCOPE_UNIVERSE": addresses.RT_SCOPE_UNIVERSE,
    "RTM_GETROUTE": routes.RTM_GETROUTE,
    "RTA_DST": routes.RTA_DST,
    "RTA_OIF": routes.RTA_OIF,
    "RTA_GATEWAY": routes.RTA_GATEWAY,
    "RTA_MULTIPATH": routes.RTA_MULTIPATH,
    "RTA_TABLE": routes.RTA_TABLE,
    "RTA_VIA": routes.RTA_VIA,
    "sizeof(struct nlmsghdr)": wire.HEADER.size,
    "sizeof(struct ifinfomsg)": links.IFINFO.size,
    "offsetof(struct ifinfomsg, ifi_type)": 2,
    "offsetof(struct ifinfomsg, ifi_index)": 4,
    "offsetof(struct ifinfomsg, ifi_flags)": 8,
    "offsetof(struct ifinfomsg, ifi_change)": 12,
    "sizeof(struct ifaddrmsg)": addresses.IFADDR.size,
    "offsetof(struct ifaddrmsg, ifa_scope)": 3,
    "offsetof(struct ifaddrmsg, ifa_index)": 4,
    "sizeof(struct rtmsg)": routes.RTMSG.size,
    "offsetof(struct rtmsg, rtm_table)": 4,
    "offsetof(struct rtmsg, rtm_type)": 7,
    "sizeof(struct rtnexthop)": routes.RTNEXTHOP.size,
    "sizeof(struct ifla_vf_mac)": links._VF_MAC.size,
    "sizeof(struct ifla_vf_vlan)": links._VF_VLAN.size,
    "sizeof(struct ifla_vf_spoofchk)": links._VF_SETTING.size,
    "sizeof(struct ifla_vf_trust)": links._VF_SETTING.size,
    "sizeof(struct ifla_vf_link_state)": links._VF_SETTING.size,
    "sizeof(struct ifla_vf_rate)": links._VF_RATE.size,
    "IFLA_VF_LINK_STATE": links.IFLA_VF_LINK_STATE,
    "IFLA_VF_RATE": links.IFLA_VF_RATE,
    "IFLA_VF_LINK_STATE_AUTO": links.VF_LINK_STATES["auto"],
    "IFLA_VF_LINK_STATE_ENABLE": links.VF_LINK_STATES["enable"],
    "IFLA_VF_LINK_STATE_DISABLE": links.VF_LINK_STATES["disable"],
    "RTM_NEWQDISC": tc.RTM_NEWQDISC,
    "RTM_NEWTFILTER": tc.RTM_NEWTFILTER,
    "TCA_KIND": tc.TCA_KIND,
    "TCA_OPTIONS": tc.TCA_OPTIONS,
    "TC_H_ROOT": tc.TC_H_ROOT,
    "TC_H_INGRESS": tc.TC_H_INGRESS,
    "TC_H_MAKE(TC_H_INGRESS, 0)": tc.INGRESS_HANDLE,
    "TCA_TBF_PARMS": tc.TCA_TBF_PARMS,
    "TCA_TBF_RATE64": tc.TCA_TBF_RATE64,
    "TCA_TBF_BURST": tc.TCA_TBF_BURST,
    "TC_LINKLAYER_ETHERNET": tc.TC_LINKLAYER_ETHERNET,
    "TCA_U32_SEL": tc.TCA_U32_SEL,
    "TCA_U32_ACT": tc.TCA_U32_ACT,
    "TC_U32_TERMINAL": tc.TC_U32_TERMINAL,
    "TCA_ACT_KIND": tc.TCA_ACT_KIND,
    "TCA_ACT_OPTIONS": tc.TCA_ACT_OPTIONS,
    "TCA_MIRRED_PARMS": tc.TCA_MIRRED_PARMS,
    "TC_ACT_STOLEN": tc.TC_ACT_STOLEN,
    "TCA_EGRESS_REDIR": tc.TCA_EGRESS_REDIR,
    "ETH_P_ALL": tc.ETH_P_ALL,
    "sizeof(struct tcmsg)": tc.TCMSG.size,
    "offsetof(struct tcmsg, tcm_ifindex)": 4,
    "offsetof(struct tcmsg, tcm_parent)": 12,
    "sizeof(struct tc_ratespec)": tc._RATESPEC.size,
    "offsetof(struct tc_ratespec, rate)": 8,
    "sizeof(struct tc_tbf_qopt)": 2 * tc._RATESPEC.size + tc._TBF_TAIL.size,
    "sizeof(struct tc_u32_sel)": tc._U32_SEL.size,
    "offsetof(struct tc_u32_sel, hmask)": 12,
    "sizeof(struct tc_u32_key)": tc._U32_KEY.size,
    "sizeof(struct tc_mirred)": tc._MIRRED.size,
    "offsetof(struct tc_mirred, eaction)": 20,
}

HEADERS = [
    "netlink", "rtnetlink", "if_link", "if_addr", "veth", "if", "if_ether", "pkt_sched",
    "pkt_cls", "tc_act/tc_mirred",
]  # fmt: skip


def test_constants_and_layouts_match_the_uapi_headers(tmp_path: Path):
    cc = hosttools.require("cc")
    source = tmp_path / "uapi.c"
    lines = [f"#include <linux/{h}.h>" for h in HEADERS]
    lines += ["#include <stdio.h>", "#include <stddef.h>", "#include <sys/socket.h>"]
    lines += ["int main(void) {"]
    lines += [f'  printf("%ld\\n", (long)({expr}));' for expr in CONSTANTS]
    lines += ["  return 0;", "}"]
    source.write_text("\n".join(lines) + "\n")
    built = subprocess.run(
        [cc, "-o", str(tmp_path / "uapi"), str(source)], capture_output=True, text=True
    )
    if "No such file" in built.stderr:
        pytest.skip(f"no kernel UAPI headers (Debian package linux-libc-dev): {built.stderr}")
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(tmp_path / "uapi")], capture_output=True, text=True, check=True)
    theirs = dict(zip(CONSTANTS, map(int, out.stdout.split()), strict=True))
    assert {k: v for k, v in CONSTANTS.items() if theirs[k] != v} == {}
