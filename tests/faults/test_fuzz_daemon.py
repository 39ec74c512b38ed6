"""Hostile configs and claim names through the real daemon over its socket, in a
throw-away namespace standing in for the node (root). Fewer examples than in-process.

Invariants as in test_fuzz_prepare.py, on the real kernel: never an "internal error";
every error names the claim, and for a config the request and the JSON paths the oracle
expects; an invalid config leaves no link, address, CDI spec or record; the node's
routes to its gateways are as before; a prepared claim holds only allowed addresses
and unprepare leaves nothing. Claim names from the kubelet that are no Kubernetes names
never reach the API server.
"""

from __future__ import annotations

import ipaddress
import json
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.faults.fuzzing import (
    GATEWAYS,
    JSON_PATH,
    PARENT_MTU,
    RANGES,
    TAKEN,
    Case,
    fuzz,
    netdev_case,
    tally,
)
from tests.support import netns
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.runtime import links_in

pytestmark = [pytest.mark.root, pytest.mark.kind("veth"), pytest.mark.kind("macvlan")]
PATH = re.compile(rf"config ({JSON_PATH}): ")
PARENT = "ens2"
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture
def node(ns, start_driver):
    """The namespace as a node (uplink up0 with addresses and default routes, macvlan
    parent ens2) and one driver serving every example."""
    netns.ip(ns, "link", "add", "up0", "type", "veth", "peer", "name", "up0p")
    netns.ip(
        ns, "link", "add", PARENT, "mtu", str(PARENT_MTU), "type", "veth", "peer", "name", "ens2p"
    )
    for link in ("up0", "up0p", PARENT, "ens2p"):
        netns.ip(ns, "link", "set", link, "up")
    netns.ip(ns, "addr", "add", "192.0.2.5/24", "dev", "up0")
    netns.ip(ns, "-6", "addr", "add", "2001:db8::5/64", "dev", "up0", "nodad")
    netns.ip(ns, "route", "add", "default", "via", GATEWAYS[0])
    netns.ip(ns, "-6", "route", "add", "default", "via", GATEWAYS[1])
    driver = start_driver("--virtual-parents", PARENT, "--claim-address-ranges", ",".join(RANGES))
    return ns, driver


def _state(ns, driver):
    links = sorted((ln["name"], ln["alias"]) for ln in links_in(ns))
    addresses = sorted(
        (a["ifname"], i["local"], i["prefixlen"])
        for a in json.loads(netns.ip(ns, "-j", "addr"))
        for i in a.get("addr_info", [])
    )
    files = sorted(p.name for d in (driver.cdi, driver.state) if d.exists() for p in d.iterdir())
    return links, addresses, files


def _routes(ns):
    return {gw: netns.ip(ns, "route", "get", gw).split("\n")[0] for gw in GATEWAYS}


@fuzz(60, share=20, shared_fixture=True)
@given(case=netdev_case(kinds=["veth", "macvlan"], parent=PARENT, max_depth=400, bad_rate=2))
def test_the_daemon_refuses_what_it_must_and_leaves_the_node_as_it_was(api, node, case: Case):
    fake, _ = api
    ns, driver = node
    before, routes = _state(ns, driver), _routes(ns)
    name = f"c-{uuid.uuid4().hex[:8]}"
    result = {"request": "nic", "pool": "node-a", "device": "netdev-virtual", "shareID": "s"}
    claim = allocated_claim(name, [result], config=[opaque(case.parameters)])
    fake.add_claim(claim)
    uid = claim["metadata"]["uid"]
    error = driver.prepare([claim]).claims[uid].error
    if error:
        assert "internal error" not in error, error
        assert error.startswith(f"claim default/{name} ({uid}): request nic: "), error
        paths = set(PATH.findall(error))
        if case.form:
            assert case.form <= paths, f"{sorted(case.form - paths)} not named: {error}"
        elif case.node and case.exact:  # junk elsewhere may be refused first
            assert paths and paths <= case.node, f"expected some of {sorted(case.node)}: {error}"
        elif case.deep:
            assert any(p == "$" or p.startswith(case.deep) for p in paths), error
        else:
            assert not case.exact, f"a good config was refused: {case.parameters!r}\n{error}"
        assert _state(ns, driver) == before, "an invalid config left something behind"
        tally("refused")
        return
    assert not case.form and not case.node and not case.deep, case.parameters
    assert _routes(ns) == routes
    ranges = [ipaddress.ip_network(r) for r in RANGES]
    for _, address, _ in set(_state(ns, driver)[1]) - set(before[1]):
        ip = ipaddress.ip_address(address)
        if ip.version == 6 and ip.is_link_local:
            continue  # the kernel's own, on the veth's host end
        assert any(ip in r for r in ranges if r.version == ip.version), address
        assert address not in TAKEN, address
    assert driver.unprepare([claim]).claims[uid].error == ""
    assert _state(ns, driver) == before
    tally("prepared")


NAMES = st.one_of(
    st.sampled_from(
        [
            "..",
            ".",
            "a/b",
            "../kube-system",
            "%2e%2e",
            "c\n",
            "",
            "C",
            "a" * 300,
            "c?x=1",
            "c#x",
            "c%2Fx",
            " c",
            "é",
        ]
    ),
    st.text(max_size=20),
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True),
)


@fuzz(30, share=40, shared_fixture=True)
@given(namespace=st.one_of(st.just("default"), NAMES), name=NAMES)
def test_claim_names_from_the_kubelet_reach_no_other_url(api, node, namespace, name):
    fake, _ = api
    _, driver = node
    uid = str(uuid.uuid4())
    claim = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
    seen = len(fake.requests)
    error = driver.prepare([claim]).claims[uid].error
    assert error.startswith(f"claim {namespace}/{name} ({uid}): "), error
    assert "internal error" not in error
    claims_asked = [p for _, p in fake.requests[seen:] if "/resourceclaims" in p]
    if claims_asked:  # a valid name, asked for exactly
        assert claims_asked == [f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"]
        assert "not found" in error, error
        tally("a Kubernetes name: asked for")
    else:
        assert "is not a Kubernetes" in error, error
        tally("no Kubernetes name: refused before any request")
