"""Which CNI networks can hold a pod to its claim's bandwidth share (handlers/cni/network.py):
one bandwidth plugin taking the share as its capability, no rates of its own, beside a
plugin that makes a veth."""

from __future__ import annotations

import json

import pytest
from dradriver.handlers.cni import network

TAKES = {"type": "bandwidth", "capabilities": {"bandwidth": True}}
BRIDGE = {"type": "bridge", "bridge": "cni-br0"}


def _problem(*plugins: dict) -> str | None:
    text = json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": list(plugins)})
    return network.bandwidth_problem(network.parse(text))


def test_a_bridge_with_a_bandwidth_plugin_taking_the_share_can():
    assert _problem(BRIDGE, {"type": "tuning"}, TAKES) is None


@pytest.mark.parametrize(
    ("plugins", "said"),
    [
        ((BRIDGE,), "it has no bandwidth plugin"),
        ((BRIDGE, TAKES, TAKES), "it has 2 bandwidth plugins"),
        ((BRIDGE, {"type": "bandwidth", "ingressRate": 1000}), "does not take the share"),
        ((BRIDGE, {**TAKES, "egressRate": 0}), "names egressRate of its own"),
        (({"type": "macvlan", "master": "eth0"}, TAKES), "only bridge or ptp make"),
    ],
    ids=["none", "two", "own-rates-only", "own-rates-beside", "no-veth"],
)
def test_what_cannot_is_named(plugins, said):
    problem = _problem(*plugins)
    assert problem is not None and said in problem, problem
