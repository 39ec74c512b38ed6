"""What the driver keeps on the local node per claim, looked up where it lives: links
in the node's network namespace (by the driver's ifalias tag, or by the shape of its
link names), CDI spec files in containerd's CDI directory, allocation records."""

from __future__ import annotations

from dataclasses import dataclass

from dradriver.contract import naming
from localcluster.layout import NodeLayout
from tests.support.driverproc import DRIVER
from tests.support.runtime import links_in


@dataclass(frozen=True)
class DriverState:
    """Claim UIDs with something of the driver on the node."""

    links: frozenset[str]  # claim UIDs of tagged links in the node's namespace
    untagged: frozenset[str]  # names of links shaped like the driver's, without a tag
    specs: frozenset[str]  # claim UIDs of CDI spec files
    records: frozenset[str]  # claim UIDs of allocation records

    def of(self, uid: str) -> list[str]:
        """What is left of one claim, by kind ([] if nothing)."""
        return [
            kind
            for kind, uids in (("link", self.links), ("spec", self.specs), ("record", self.records))
            if uid in uids
        ]


def driver_state(lay: NodeLayout, driver: str = DRIVER) -> DriverState:
    """What a driver (by name) holds on the node: tagged links, specs, records."""
    links, untagged = set(), set()
    for link in links_in(lay.netns):
        parsed = naming.parse_ifalias(link["alias"])
        if parsed:
            links.add(parsed[0])
        elif naming.is_host_ifname(link["name"]):
            untagged.add(link["name"])
    # <driver>-<type>_<claim uid>.json (naming.cdi_spec_filename)
    cdi_dir = lay.on_host(lay.cdi_dir)
    specs = {
        p.name.rsplit("_", 1)[1].removesuffix(".json") for p in cdi_dir.glob(f"{driver}-*_*.json")
    }
    state_dir = cdi_dir / f"{driver}-state"
    records = {p.name.split(".")[0] for p in state_dir.glob("*.alloc.json")}
    return DriverState(frozenset(links), frozenset(untagged), frozenset(specs), frozenset(records))
