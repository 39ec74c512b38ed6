"""deploy/cni-examples.yaml as the tiers check it: per example network, the address its
pod gets on net1 (a prefix: host-local picks within the NAD's range) and the kernel
feature it needs (a bridge network's pod sees a veth)."""

from __future__ import annotations

from localcluster.manifests import DEPLOY

EXAMPLES = DEPLOY / "cni-examples.yaml"
EXPECTED = {
    "macvlan-conf": ("203.0.113.1", "macvlan"),
    "bridge-static": ("198.51.100.210/24", "bridge"),
    "ipvlan-conf": ("203.0.113.1", "ipvlan"),
    "vlan-conf": ("203.0.113.", "vlan"),
    "tuned-limited": ("192.0.2.1", "bridge"),
}
