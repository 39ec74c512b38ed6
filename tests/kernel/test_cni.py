"""The cni family against Debian's real CNI plugins: ADD into a pod's namespace, DEL, CHECK.

The test's namespace plays the node (the plugins run from the test's thread, so they
see it as the host), throw-away namespaces play pod sandboxes, and host-local keeps
its leases in the test's temporary directory.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from dradriver.base.errors import ClaimError, ConfigError, DeviceError
from dradriver.contract.hookspecs import NRI, PodSandbox
from dradriver.settings import DEFAULT_CNI_PLUGINS
from tests.deploy.support import docs
from tests.support import ipjson, netns
from tests.support.cniexamples import EXAMPLES, EXPECTED
from tests.support.handlers import context, request

pytestmark = [pytest.mark.root, pytest.mark.kind("cni")]

BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
DEFAULT_PLUGINS = tuple(DEFAULT_CNI_PLUGINS.split(","))
PLUGINS = ("bridge", "host-local", "macvlan", "static", "tuning", "bandwidth", "loopback")

if not (BIN / "bridge").exists():
    pytestmark.append(pytest.mark.skip(reason="containernetworking-plugins is not installed"))


@pytest.fixture
def host(in_ns):
    """The node: a veth end p0 as a macvlan parent."""
    netns.ip(in_ns, "link", "add", "p0", "type", "veth", "peer", "name", "q0")
    netns.ip(in_ns, "link", "set", "p0", "up")
    return in_ns


@pytest.fixture
def pods():
    """Up to two namespaces standing for pod sandboxes; deleted after the test."""
    made = [netns.create("pod"), netns.create("pod")]
    yield made
    for name in made:
        netns.delete(name)


def _prepared(config: dict, ctx, consumed: dict | None = None, **fields):
    """Validate and prepare a cni claim in NRI mode, as prepare.py does (`consumed`: what
    the scheduler gave it of the device's capacities)."""
    params = {"type": "cni", "cni": {"config": json.dumps(config), **fields}}
    handler, req = request(params, ctx=ctx, consumed=consumed)
    req = dataclasses.replace(req, injection=NRI)
    validated = handler.validate(req)
    return handler, validated, handler.prepare(req)


def _sandbox(name: str) -> PodSandbox:
    return PodSandbox(uuid.uuid4().hex, f"/run/netns/{name}", str(uuid.uuid4()), "default", "p")


def _addresses(ns: str, ifname: str) -> list[str]:
    [found] = json.loads(netns.ip(ns, "-j", "-4", "addr", "show", "dev", ifname))
    return [f"{a['local']}/{a['prefixlen']}" for a in found["addr_info"]]


def _names(ns: str) -> list[str]:
    return [ln.name for ln in ipjson.links(ns)]


def _ctx(state: Path, **kw) -> object:
    """The node's settings, host-local's leases under `state`."""
    return context(
        **{
            "virtual_parents": ("p0", "drtestbr*"),
            "cni_bin_dir": BIN,
            "cni_plugins": PLUGINS,
            "cni_state_dir": state,
            "cni_timeout": 30.0,  # the plugins take seconds under software emulation
            **kw,
        }
    )


def _macvlan() -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": "macvlan-conf",
        "plugins": [
            {
                "type": "macvlan",
                "master": "p0",
                "mode": "bridge",
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.30.0.0/24"}]]},
            }
        ],
    }


def test_macvlan_with_host_local_reaches_the_pod_and_leaves_nothing(host, pods, tmp_path):
    handler, validated, prepared = _prepared(_macvlan(), _ctx(tmp_path))
    assert validated.container_interfaces == ("net1",)
    assert prepared.pod_attach == "net1" and prepared.edits == {}
    sandbox = _sandbox(pods[0])
    attached = handler.attach(prepared.undo, sandbox)
    [address] = _addresses(pods[0], "net1")
    assert address.startswith("10.30.0.") and address.endswith("/24")
    assert attached.network_data is not None
    assert attached.network_data.ips == (address,)
    assert attached.network_data.hardware_address == ipjson.link_info(pods[0], "net1")["address"]
    leases = tmp_path / "networks" / "macvlan-conf"
    assert (leases / address.split("/")[0]).read_text().startswith(sandbox.id)
    handler.check(prepared.undo, sandbox, attached.state)
    handler.detach(prepared.undo, sandbox, attached.state)
    assert "net1" not in _names(pods[0])
    assert not (leases / address.split("/")[0]).exists()
    handler.detach(prepared.undo, sandbox, attached.state)  # again: nothing left, no error


def test_two_pods_on_one_bridge_with_static_addresses_reach_each_other(host, pods, tmp_path):
    config = {
        "cniVersion": "1.0.0",
        "name": "bridge-static",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "drtestbr0",
                "ipam": {"type": "static"},
                "capabilities": {"ips": True},
            },
            {"type": "tuning", "mtu": 1400},
        ],
    }
    attached = []
    for pod, ip in zip(pods, ("10.31.0.1/24", "10.31.0.2/24"), strict=True):
        handler, _, prepared = _prepared(config, _ctx(tmp_path), ips=[ip])
        sandbox = _sandbox(pod)
        attached.append((handler, prepared, sandbox, handler.attach(prepared.undo, sandbox)))
        assert _addresses(pod, "net1") == [ip]
        assert ipjson.link_info(pod, "net1")["mtu"] == 1400
    with netns.inside(pods[1]), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("10.31.0.2", 9999))
        server.settimeout(10)
        with netns.inside(pods[0]), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.sendto(b"over the bridge", ("10.31.0.2", 9999))
        data, sender = server.recvfrom(64)
    assert (data, sender[0]) == (b"over the bridge", "10.31.0.1")
    for handler, prepared, sandbox, got in attached:
        handler.detach(prepared.undo, sandbox, got.state)
    assert all("net1" not in _names(p) for p in pods)
    # the host ends of the veths went with DEL; the bridge is the plugin's own, left
    assert json.loads(netns.ip(host, "-j", "link", "show", "master", "drtestbr0")) == []


def _bridge_with_bandwidth(capability: bool = True) -> dict:
    shaper = {"type": "bandwidth", "capabilities": {"bandwidth": True}}
    return {
        "cniVersion": "1.0.0",
        "name": "bridge-limited",
        "plugins": [
            {"type": "bridge", "bridge": "drtestbr1", "ipam": {"type": "static"},
             "capabilities": {"ips": True}},
            *([shaper] if capability else []),
        ],
    }  # fmt: skip


def _qdisc_rates(ns: str, dev: str) -> list[tuple[str, int]]:
    """(kind, rate in bit/s) of the root qdiscs of `dev` that have a rate."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "-j", "qdisc", "show", "dev", dev],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [
        (q["kind"], q["options"]["rate"]) for q in json.loads(out) if "rate" in q.get("options", {})
    ]


def test_the_claims_bandwidth_share_reaches_the_bandwidth_plugin(host, pods, tmp_path):
    """The scheduler gave the claim 10M of the device's bandwidth: the bandwidth plugin
    limits both directions to it (the host end of the pod's veth, and its ifb)."""
    handler, _, prepared = _prepared(
        _bridge_with_bandwidth(), _ctx(tmp_path), {"bandwidth": "10M"}, ips=["10.32.0.1/24"]
    )
    sandbox = _sandbox(pods[0])
    attached = handler.attach(prepared.undo, sandbox)
    [port] = json.loads(netns.ip(host, "-j", "link", "show", "master", "drtestbr1"))
    ifbs = [ln.name for ln in ipjson.links(host) if ln.name.startswith("bwp")]
    assert len(ifbs) == 1
    rate = 10_000_000 // 8  # tc's JSON gives bytes per second
    assert _qdisc_rates(host, port["ifname"]) == [("tbf", rate)]
    assert _qdisc_rates(host, ifbs[0]) == [("tbf", rate)]
    handler.detach(prepared.undo, sandbox, attached.state)
    assert not [ln.name for ln in ipjson.links(host) if ln.name.startswith("bwp")]


def test_bandwidth_a_network_cannot_enforce_is_refused(host, tmp_path):
    params = {"type": "cni", "cni": {"config": json.dumps(_bridge_with_bandwidth(False))}}
    handler, req = request(params, ctx=_ctx(tmp_path), consumed={"bandwidth": "10M"})
    with pytest.raises(
        ClaimError,
        match=r"capacity.requests.bandwidth: network bridge-limited cannot hold the pod.*"
        r"no bandwidth plugin",
    ):
        handler.validate(dataclasses.replace(req, injection=NRI))


def test_a_plugin_failing_mid_chain_leaves_nothing_and_is_named(host, pods, tmp_path):
    config = _macvlan()
    config["plugins"].append({"type": "tuning", "sysctl": {"net.ipv4.conf.net1.no_such_key": "1"}})
    handler, _, prepared = _prepared(config, _ctx(tmp_path))
    with pytest.raises(DeviceError) as err:
        handler.attach(prepared.undo, _sandbox(pods[0]))
    assert "plugin tuning (CNI ADD) failed" in str(err.value)
    assert "no_such_key" in str(err.value)
    assert "net1" not in _names(pods[0])
    leases = tmp_path / "networks" / "macvlan-conf"
    assert not leases.exists() or [p.name for p in leases.iterdir() if p.name[0].isdigit()] == []


def test_check_reports_an_interface_removed_by_hand(host, pods, tmp_path):
    handler, _, prepared = _prepared(_macvlan(), _ctx(tmp_path))
    sandbox = _sandbox(pods[0])
    attached = handler.attach(prepared.undo, sandbox)
    netns.ip(pods[0], "link", "del", "net1")
    with pytest.raises(
        DeviceError, match=r"^network macvlan-conf: plugin macvlan \(CNI CHECK\) failed: .*net1"
    ):
        handler.check(prepared.undo, sandbox, attached.state)
    handler.detach(prepared.undo, sandbox, attached.state)


def test_refused_at_prepare_what_no_claim_may_do_on_the_node(host, tmp_path):
    ctx = _ctx(tmp_path)
    config = _macvlan()
    with pytest.raises(ConfigError, match=r"plugin macvlan is not allowed.*--cni-plugins"):
        _prepared(config, _ctx(tmp_path, cni_plugins=("bridge", "host-local")))
    config["plugins"][0]["master"] = "q0"
    with pytest.raises(ConfigError, match=r"q0 is not on the operator's list of parent"):
        _prepared(config, ctx)
    del config["plugins"][0]["master"]
    with pytest.raises(ConfigError, match=r"master: required: .*the default route"):
        _prepared(config, ctx)
    config["plugins"][0]["master"] = "p0"
    config["plugins"][0]["ipam"]["dataDir"] = "/etc"
    with pytest.raises(ConfigError, match=r"ipam.dataDir: names a file or directory"):
        _prepared(config, ctx)
    tuning = {"cniVersion": "1.0.0", "name": "t", "type": "tuning", "dataDir": "/etc"}
    with pytest.raises(ConfigError, match=r"plugins\[0\].dataDir: names a directory"):
        _prepared(tuning, ctx)
    bridge = {"cniVersion": "1.0.0", "name": "b", "type": "bridge", "isGateway": True}
    with pytest.raises(ConfigError) as err:
        _prepared(bridge, ctx)
    assert "isGateway: would give the node an address" in str(err.value)
    assert "bridge: cni0 is not on the operator's list" in str(err.value)
    del config["plugins"][0]["ipam"]["dataDir"]
    config["plugins"][0]["runtimeConfig"] = {"deviceID": "0000:00:03.0"}
    with pytest.raises(ConfigError, match=r"runtimeConfig: is the runtime's to pass"):
        _prepared(config, ctx)
    del config["plugins"][0]["runtimeConfig"]
    outside = _macvlan()
    outside["plugins"][0]["ipam"]["ranges"] = [[{"subnet": "172.16.5.0/24"}]]
    with pytest.raises(
        ConfigError, match=r"ranges\[0\]\[0\]: 172.16.5.1-172.16.5.254 is not inside"
    ):
        _prepared(outside, ctx)
    config["cniVersion"] = "9.9.0"
    with pytest.raises(ConfigError, match=r"cniVersion 9.9.0: plugin macvlan speaks .*1\.0\.0"):
        _prepared(config, ctx)
    with pytest.raises(ConfigError, match=r"\$\.cni\.config: not a CNI network configuration"):
        handler, req = request({"type": "cni", "cni": {"config": "{nope}"}}, ctx=ctx)
        handler.validate(dataclasses.replace(req, injection=NRI))
    with pytest.raises(ConfigError, match=r"needs the NRI injection mode"):
        handler, req = request({"type": "cni", "cni": {"config": json.dumps(config)}}, ctx=ctx)
        handler.validate(req)


# -- the examples of deploy/cni-examples.yaml, unchanged ------------------------------------


def _link_kind(name: str) -> str:
    """The link kind the example's pod sees on net1 (a bridge network's is a veth)."""
    feature = EXPECTED[name][1]
    return "veth" if feature == "bridge" else feature


def _example(name: str) -> pytest.param:
    kind = _link_kind(name)
    marks = [pytest.mark.kernel(kind)] if kind in ("ipvlan", "vlan") else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_example(n) for n in EXPECTED])
def test_each_example_network_attachment_definition_as_it_is(in_ns, pods, tmp_path, name):
    """The node's uplink is eth0 here (a veth end in the test's namespace)."""
    netns.ip(in_ns, "link", "add", "eth0", "type", "veth", "peer", "name", "uplink")
    netns.ip(in_ns, "link", "set", "eth0", "up")
    [nad] = [
        d for d in docs(EXAMPLES)
        if d["kind"] == "NetworkAttachmentDefinition" and d["metadata"]["name"] == name
    ]  # fmt: skip
    [template] = [
        d for d in docs(EXAMPLES)
        if d["kind"] == "ResourceClaimTemplate" and d["metadata"]["name"] == name
    ]  # fmt: skip
    [config] = template["spec"]["spec"]["devices"]["config"]
    fields = dict(config["opaque"]["parameters"]["cni"])
    assert fields.pop("networkAttachment") == name
    ctx = _ctx(tmp_path, virtual_parents=("eth0", "cni-br*"), cni_plugins=DEFAULT_PLUGINS)
    handler, _, prepared = _prepared(json.loads(nad["spec"]["config"]), ctx, **fields)
    sandbox = _sandbox(pods[0])
    attached = handler.attach(prepared.undo, sandbox)
    try:
        prefix, kind = EXPECTED[name][0], _link_kind(name)
        [address] = _addresses(pods[0], "net1")
        assert address.startswith(prefix), address
        info = ipjson.link_info(pods[0], "net1")
        assert info["linkinfo"]["info_kind"] == kind
        assert attached.network_data.ips == (address,)
        if name == "tuned-limited":
            assert info["mtu"] == 1400
            rp = netns.ip(pods[0], "netconf", "show", "dev", "net1")
            assert "rp_filter loose" in rp, rp
            tc = ["tc", "-n", in_ns, "-j", "qdisc", "show"]
            qdiscs = json.loads(subprocess.run(tc, capture_output=True, check=True).stdout)
            assert any(q["kind"] == "tbf" for q in qdiscs), qdiscs  # on the node's veth end
            assert list((tmp_path / "tuning").iterdir()), "tuning's backup in the state dir"
        handler.check(prepared.undo, sandbox, attached.state)
    finally:
        handler.detach(prepared.undo, sandbox, attached.state)
    assert "net1" not in _names(pods[0])
    leases = tmp_path / "networks" / name
    assert not leases.exists() or [p.name for p in leases.iterdir() if p.name[0].isdigit()] == []
