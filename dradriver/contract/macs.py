"""Which MAC addresses a claim may give a link that shares the node's LAN (pure).

A macvlan's MAC is seen on the node's LAN, where a globally administered (burned-in)
address may be a neighbour's: cloning the gateway's moves its traffic to the node's
port. Such a link may take a locally administered address, or one the operator lists
(`--macvlan-global-macs`): the schema's pattern for its `macAddress` says both, so the
schema check at prepare, `dra-driver validate-config` and the admission policy agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A locally administered unicast address (the second-lowest bit of the first octet set,
# the lowest clear): one no network card was given.
LOCAL_MAC_PATTERN = r"^[0-9A-Fa-f][26AaEe](:[0-9A-Fa-f]{2}){5}$"
# A unicast Ethernet address the kernel accepts (is_valid_ether_addr): the group bit
# (lowest bit of the first octet) clear, and not all zeros (ZERO_MAC).
ETHERNET_MAC_PATTERN = r"^[0-9A-Fa-f][02468AaCcEe](:[0-9A-Fa-f]{2}){5}$"
ZERO_MAC = "00:00:00:00:00:00"


def allowed_global(entries: Iterable[str]) -> tuple[str, ...]:
    """The operator's list, lower case, each checked: raise ValueError naming the first
    entry that is not a unicast Ethernet address aa:bb:cc:dd:ee:ff."""
    out: list[str] = []
    for entry in entries:
        mac = entry.strip().lower()
        if not re.match(ETHERNET_MAC_PATTERN, mac) or mac == ZERO_MAC:
            raise ValueError(
                f"{entry!r} is not a unicast Ethernet address aa:bb:cc:dd:ee:ff (the lowest "
                "bit of the first octet clear, not all zeros)"
            )
        if mac not in out:
            out.append(mac)
    return tuple(out)


def local_or(allowed: Iterable[str]) -> str:
    """The pattern of a locally administered address or one of `allowed` (any case)."""
    macs = "|".join(allowed_global(allowed))
    if not macs:
        return LOCAL_MAC_PATTERN
    return f"^(?:{LOCAL_MAC_PATTERN[1:-1]}|(?i:{macs}))$"
