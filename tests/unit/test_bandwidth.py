"""Bandwidth as a consumable capacity of the virtual device: the operator's settings, what
the slice offers, what the scheduler's allocation gives a claim, and the limits prepare
puts on the claim's links (in the in-memory kernel; tests/kernel measures real traffic)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import struct
import uuid
from typing import Any

import pytest
from dradriver.handlers.netdev import sriov, virtual

from dradriver import settings
from dradriver.apiserver import slices
from dradriver.base.errors import ConfigError
from dradriver.claims import resolution
from dradriver.contract import naming, quantity
from dradriver.contract.hookspecs import Capacity, ClaimRef
from dradriver.daemon import context_of
from dradriver.kernel.rtnl import tc, wire
from dradriver.kit import hostif
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.fakesys import FakeSys
from tests.support.handlers import context, request
from tests.support.statenode import (
    KINDS,
    UID,
    Node,
    add_claim,
    claim_object,
    prepare_one,
    unprepare_one,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100M", 100_000_000),
        ("1G", 10**9),
        ("1Gi", 2**30),
        ("2.5G", 2_500_000_000),
        ("1e9", 10**9),
        ("1500k", 1_500_000),
        ("12", 12),
        ("1500m", 2),  # a fraction of a bit rounds up
    ],
)
def test_quantities_are_read_as_the_api_server_writes_them(text, value):
    assert quantity.parse(text) == value


@pytest.mark.parametrize("text", ["", "M", "100 Mbit", "1.2.3G", "10Q", "1e99"])
def test_what_is_not_a_quantity_is_refused_with_the_text(text):
    with pytest.raises(ValueError, match=r"quantity|range"):
        quantity.parse(text)


def test_quantities_render_in_their_shortest_exact_form():
    assert [quantity.render(v) for v in (10**10, 100_000_000, 1_500_000, 1234, 0)] == [
        "10G",
        "100M",
        "1500k",
        "1234",
        "0",
    ]


def _settings(monkeypatch, *argv):
    for var in ("DRA_VIRTUAL_BANDWIDTH", "DRA_BANDWIDTH_STEP"):
        monkeypatch.delenv(var, raising=False)
    parser = argparse.ArgumentParser()
    settings.add_flags(parser, run=False)
    return settings.from_args(parser.parse_args(["--node-name", "n", *argv]))


def test_the_operator_sets_the_bandwidth_and_its_step(monkeypatch):
    default = _settings(monkeypatch)
    assert (default.virtual_bandwidth, default.bandwidth_step) == (0, 1_000_000)
    s = _settings(monkeypatch, "--virtual-bandwidth", "10G", "--bandwidth-step", "10M")
    assert (s.virtual_bandwidth, s.bandwidth_step) == (10**10, 10**7)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--virtual-bandwidth", "fast"], "--virtual-bandwidth: 'fast' is not a quantity"),
        (["--virtual-bandwidth", "1500k"], "1500k is not a multiple of --bandwidth-step 1M"),
        (["--bandwidth-step", "0"], "--bandwidth-step must be 1k to 10T"),
        (["--virtual-bandwidth", "100T"], "--virtual-bandwidth must be 1M to 10T"),
    ],
)
def test_bad_bandwidth_settings_stop_the_start_with_the_flag_named(monkeypatch, argv, message):
    with pytest.raises(SystemExit, match=message):
        _settings(monkeypatch, *argv)


def test_the_virtual_device_offers_the_operators_bandwidth_in_steps():
    [device] = virtual.virtual_device(context(virtual_bandwidth=10**10, bandwidth_step=10**6))
    body = slices.device_json(device)
    assert body["capacity"]["bandwidth"] == {
        "value": "10G",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1M"}},
    }
    assert body["capacity"]["slots"]["requestPolicy"]["default"] == "1"
    # Where the API server has no consumable capacity, shares count slots, not bandwidth.
    shares = slices.single_allocation([device])
    assert len(shares) == 128 and not any(d.capacity for d in shares)


def test_without_a_bandwidth_setting_the_slice_offers_none():
    [device] = virtual.virtual_device(context())
    assert set(slices.device_json(device)["capacity"]) == {"slots"}


def test_what_the_scheduler_gave_a_request_is_read_from_its_result():
    result = {"request": "nic", "driver": "dra.example.com", "pool": "node-a"}
    result |= {"device": "netdev-virtual", "consumedCapacity": {"bandwidth": "100M"}}
    claim = allocated_claim("c", [result], uid=UID, config=[opaque({"type": "netdev"})])
    [device] = resolution.resolve(claim, ClaimRef("default", "c", UID), "dra.example.com").devices
    assert device.consumed == {"bandwidth": "100M"}


def _limits(node: Node) -> dict[str, tuple[int | None, str | None]]:
    names = {ln.index: n for n, ln in node.kernel.table.items()}
    return {
        n: (ln.rate, names.get(ln.redirect or 0))
        for n, ln in node.kernel.table.items()
        if ln.rate or ln.redirect
    }


def test_a_claim_given_bandwidth_is_limited_both_ways_until_unprepare(node: Node):
    add_claim(node, "veth-limited")
    outcome = prepare_one(node.preparer())
    assert outcome.error is None
    [ifb] = [n for n, ln in node.kernel.table.items() if ln.kind == "ifb"]
    [host_end] = [n for n, ln in node.kernel.table.items() if ln.kind == "veth" and ln.rate]
    limits = _limits(node)
    # What the pod receives leaves through the host end; what it sends, through the ifb.
    assert limits == {host_end: (100_000_000, ifb), ifb: (100_000_000, None)}
    assert node.kernel.table[ifb].up and node.kernel.table[ifb].alias
    record = json.loads((node.state_dir / f"{UID}.alloc.json").read_text())
    [key] = record["capacity"]
    assert record["capacity"][key]["bandwidth"] == "100M"
    [meta] = [p for p in node.plugin_dir.rglob("*.json")]
    first, _ = json.JSONDecoder().raw_decode(meta.read_text())  # (one per API version)
    [device] = first["requests"][0]["devices"]
    assert device["consumedCapacity"]["bandwidth"] == "100M"
    assert unprepare_one(node.preparer()).error is None
    assert _limits(node) == {} and set(node.kernel.table) == {"ens1", "ens2"}
    assert node.files() == []


def test_a_claim_without_bandwidth_is_not_limited(node: Node):
    add_claim(node, "veth")
    assert prepare_one(node.preparer()).error is None
    assert _limits(node) == {}
    assert "capacity" not in json.loads((node.state_dir / f"{UID}.alloc.json").read_text())


def test_bandwidth_on_a_kind_that_cannot_enforce_it_is_refused_naming_the_field(node: Node):
    device, netdev, share = KINDS["macvlan"]
    claim = claim_object(UID, device, {"type": "netdev", "netdev": netdev}, share)
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {
        "bandwidth": "100M"
    }
    node.api.fake.add_claim(claim)
    error = prepare_one(node.preparer()).error or ""
    assert "request nic: capacity.requests.bandwidth: kind macvlan cannot be limited" in error
    assert set(node.kernel.table) == {"ens1", "ens2"} and node.files() == []
    assert prepare_one(node.preparer()).error == error  # still refused, nothing half-done


def _attrs(body: bytes) -> dict[int, bytes]:
    return wire.attrs(body, tc.TCMSG.size)


def test_the_token_bucket_is_sent_in_bytes_per_second_with_its_burst():
    kind, _, body = tc.tbf(7, 100_000_000)
    assert kind == tc.RTM_NEWQDISC
    _, index, _, parent, _ = tc.TCMSG.unpack_from(body)
    assert (index, parent) == (7, tc.TC_H_ROOT)
    attrs = _attrs(body)
    assert wire.string(attrs[tc.TCA_KIND]) == "tbf"
    options = wire.attrs(attrs[tc.TCA_OPTIONS])
    rate = struct.unpack_from("=BBHhHI", options[tc.TCA_TBF_PARMS])
    assert rate[1] == tc.TC_LINKLAYER_ETHERNET and rate[5] == 12_500_000
    assert wire.u32(options[tc.TCA_TBF_BURST]) == tc.MIN_BURST
    assert tc.TCA_TBF_RATE64 not in options


def test_a_rate_beyond_32_bits_of_bytes_goes_as_rate64():
    _, _, body = tc.tbf(7, 40 * 10**9)
    options = wire.attrs(_attrs(body)[tc.TCA_OPTIONS])
    assert struct.unpack_from("=BBHhHI", options[tc.TCA_TBF_PARMS])[5] == 0xFFFFFFFF
    assert struct.unpack("=Q", options[tc.TCA_TBF_RATE64]) == (5 * 10**9,)
    assert wire.u32(options[tc.TCA_TBF_BURST]) == 25_000_000  # 5 ms of traffic


def test_the_redirect_sends_every_received_packet_to_the_ifb():
    kind, _, body = tc.redirect(7, 9)
    assert kind == tc.RTM_NEWTFILTER
    _, index, _, parent, _ = tc.TCMSG.unpack_from(body)
    assert (index, parent) == (7, tc.INGRESS_HANDLE)
    options = wire.attrs(_attrs(body)[tc.TCA_OPTIONS])
    action = wire.attrs(wire.attrs(options[tc.TCA_U32_ACT])[1])
    assert wire.string(action[tc.TCA_ACT_KIND]) == "mirred"
    parms = wire.attrs(action[tc.TCA_ACT_OPTIONS])[tc.TCA_MIRRED_PARMS]
    assert struct.unpack("=IIiiiiI", parms)[2:] == (tc.TC_ACT_STOLEN, 0, 0, 1, 9)


def test_an_ifb_of_another_owner_with_the_claims_name_is_never_touched(node: Node):
    add_claim(node, "veth-limited")
    share = str(uuid.UUID(int=uuid.UUID(UID).int ^ 1))  # the share statenode's claims get
    name = naming.host_ifname(UID, naming.device_key("nic", "netdev-virtual", share), "b")
    node.kernel.add(name, "ifb", alias="dra:someone-else")
    error = prepare_one(node.preparer()).error or ""
    assert f"interface {name} exists and belongs to someone else" in error
    assert node.kernel.table[name].alias == "dra:someone-else"
    assert set(node.kernel.table) == {"ens1", "ens2", name} and node.files() == []


# -- whole devices: host NICs and VFs -------------------------------------------------


def _vf_node(tmp_path, pf: str = "pf0", pf_speed: int | None = None) -> FakeSys:
    fs = FakeSys(tmp_path)
    fs.sriov(pf, "0000:3b:00.0", {0: ("0000:3b:00.2", "vf0"), 1: ("0000:3b:00.3", "vf1")})
    if pf_speed is not None:
        (tmp_path / "class" / "net" / pf / "speed").write_text(f"{pf_speed}\n")
    return fs


def test_the_vfs_of_a_pf_offer_its_link_speed_as_bandwidth(tmp_path):
    _vf_node(tmp_path)  # 25000 Mb/s
    devices = sriov.discover(context(sysfs_root=tmp_path, sriov_pfs=("pf0",)))
    assert [slices.device_json(d)["capacity"] for d in devices] == [
        {"bandwidth": {"value": "25G"}}  # no request policy: a VF goes to one claim whole
    ] * 2


def test_a_pf_whose_speed_is_unknown_offers_the_operators_figure_or_says_it_offers_none(
    tmp_path, caplog
):
    # what the kernel reports without a link (a PF no other test names: said once a run)
    _vf_node(tmp_path, "pf-nolink", pf_speed=-1)
    ctx = context(sysfs_root=tmp_path, sriov_pfs=("pf-nolink",))
    with caplog.at_level(logging.WARNING):
        assert [d.capacity for d in sriov.discover(ctx)] == [{}, {}]
        sriov.discover(ctx)  # said once, not at every discovery
    said = [r for r in caplog.records if "link speed not reported" in r.getMessage()]
    assert len(said) == 1 and said[0].link == "pf-nolink" and "--link-bandwidth" in said[0].msg
    given = dataclasses.replace(ctx, link_bandwidth=10**10)
    assert [d.capacity for d in sriov.discover(given)] == [{"bandwidth": Capacity("10G")}] * 2


def test_the_operator_sets_the_bandwidth_of_links_without_a_speed(monkeypatch):
    assert _settings(monkeypatch).link_bandwidth == 0
    assert _settings(monkeypatch, "--link-bandwidth", "10G").link_bandwidth == 10**10
    for bad in ("1500k", "fast", "20T"):
        with pytest.raises(SystemExit, match="--link-bandwidth"):
            _settings(monkeypatch, "--link-bandwidth", bad)


def _whole_claim(requests: list[dict[str, Any]], request: str) -> dict[str, Any]:
    result = {"request": request, "driver": "dra.example.com", "pool": "node-a", "device": "vf-x"}
    claim = allocated_claim("c", [result], uid=UID, config=[opaque({"type": "netdev"})])
    claim["spec"]["devices"]["requests"] = requests
    return claim


@pytest.mark.parametrize(
    ("request_name", "requests"),
    [
        ("nic", [{"name": "nic", "exactly": {"capacity": {"requests": {"bandwidth": "2G"}}}}]),
        (
            "nic/vf",
            [
                {
                    "name": "nic",
                    "firstAvailable": [
                        {"name": "fast", "capacity": {"requests": {"bandwidth": "9G"}}},
                        {"name": "vf", "capacity": {"requests": {"bandwidth": "2G"}}},
                    ],
                }
            ],
        ),
    ],
)
def test_what_a_whole_device_request_asked_for_is_read_from_the_claims_spec(request_name, requests):
    claim = _whole_claim([{"name": "other", "exactly": {}}, *requests], request_name)
    [device] = resolution.resolve(claim, ClaimRef("default", "c", UID), "dra.example.com").devices
    assert device.consumed == {"bandwidth": "2G"}
    # A shared device's consumedCapacity is what the scheduler gave: it wins.
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"slots": "1"}
    [device] = resolution.resolve(claim, ClaimRef("default", "c", UID), "dra.example.com").devices
    assert device.consumed == {"slots": "1"}


def test_a_vf_config_that_limits_the_rate_too_is_refused_naming_the_field(tmp_path):
    _vf_node(tmp_path)
    ctx = context(sysfs_root=tmp_path, sriov_pfs=("pf0",))
    vf = sriov.discover(ctx)[0]
    params = {"type": "netdev", "netdev": {"kind": "sriov-vf", "maxTxRate": 50}}
    handler, req = request(params, device=vf, ctx=ctx, consumed={"bandwidth": "100M"})
    with pytest.raises(ConfigError, match="maxTxRate and the request's capacity") as caught:
        handler.validate(req)
    assert caught.value.issues[0][0] == "$.netdev.maxTxRate"


def test_auto_offers_the_uplinks_link_speed_at_start_in_whole_steps(tmp_path, monkeypatch, caplog):
    assert _settings(monkeypatch, "--virtual-bandwidth", "auto").virtual_bandwidth == (
        settings.AUTO_BANDWIDTH
    )
    fs = FakeSys(tmp_path)
    fs.nic("up0", "0000:3b:00.0")  # 25000 Mb/s
    fs.nic("down0", "0000:3c:00.0", carrier=0)  # no link: no speed
    uplinks = {"up0"}
    monkeypatch.setattr(hostif, "primary_interfaces", lambda: set(uplinks))
    auto = settings.Settings(
        node_name="n",
        sysfs_root=tmp_path,
        virtual_bandwidth=settings.AUTO_BANDWIDTH,
        bandwidth_step=3 * 10**6,
    )
    ctx = context_of(auto)
    assert ctx.virtual_bandwidth == 24_999_000_000  # 25G, down to a multiple of 3M
    [device] = virtual.virtual_device(ctx)
    assert device.capacity["bandwidth"].value == "24999M"
    uplinks.add("down0")  # a second default route, on a link that reports no speed
    assert context_of(auto).virtual_bandwidth == 24_999_000_000
    uplinks.discard("up0")
    with caplog.at_level(logging.WARNING):
        ctx = context_of(auto)
    assert ctx.virtual_bandwidth == 0  # nothing known: no bandwidth, and said so
    [device] = virtual.virtual_device(ctx)
    assert set(device.capacity) == {"slots"}
    assert any("--virtual-bandwidth auto" in r.getMessage() for r in caplog.records)
