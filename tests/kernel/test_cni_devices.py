"""The cni family with a plugin that takes a whole device: Debian's host-device plugin
given the VF of qemu's igb the claim was allocated (the kernel-VM tier's `--nics`), as
Multus gives it an SR-IOV device's PCI address. Elsewhere these tests skip: no such NIC.

The tests run in the VM's own network namespace (the node): PCI functions belong there.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dradriver.handlers.netdev import sriov

from dradriver.base.errors import ConfigError
from dradriver.contract.hookspecs import NRI, PodSandbox
from tests.support import ipjson, netns, pcinics
from tests.support.handlers import context, request
from tests.support.runtime import seen_in

pytestmark = [pytest.mark.root, pytest.mark.kind("cni")]

BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
PLUGINS = ("host-device", "static", "bridge")
ADDRESS = "10.30.0.51/24"


@pytest.fixture
def igb() -> Iterator[str]:
    """The first igb PF, up, without VFs before and after."""
    pf = pcinics.netdevs(pcinics.IGB_PF)[0]
    netns.ip_host("link", "set", pf, "up")
    pcinics.set_numvfs(pf, 0)
    pcinics.wait_link(pf)
    yield pf
    pcinics.set_numvfs(pf, 0)


def _host_links() -> list[str]:
    return [ln["ifname"] for ln in json.loads(netns.ip_host("-j", "link", "show"))]


def _network(*plugins: dict) -> str:
    return json.dumps({"cniVersion": "1.0.0", "name": "vf-net", "plugins": list(plugins)})


def _host_device() -> dict:
    return {"type": "host-device", "ipam": {"type": "static", "addresses": [{"address": ADDRESS}]}}


def _request(pf: str, tmp_path: Path, text: str, index: int):
    """The cni handler and an NRI-mode request for VF `index` of `pf`, allocated."""
    ctx = context(
        sriov_pfs=(pf,),
        cni_bin_dir=BIN,
        cni_plugins=PLUGINS,
        cni_state_dir=tmp_path,
        cni_timeout=30.0,  # the plugins take seconds under software emulation
        virtual_parents=("drtestbr*",),
    )
    vf = sriov.discover(ctx)[index]
    handler, req = request({"type": "cni", "cni": {"config": text}}, device=vf, ctx=ctx)
    return handler, dataclasses.replace(req, injection=NRI)


@pytest.mark.kernel("igb-sriov")
def test_host_device_takes_the_allocated_vf_into_the_pod_and_gives_it_back(igb, pod, tmp_path):
    vfs = pcinics.set_numvfs(igb, 2)
    handler, req = _request(igb, tmp_path, _network(_host_device()), 1)
    handler.validate(req)
    prepared = handler.prepare(req)
    assert vfs[1] in _host_links()  # nothing moves at prepare
    sandbox = PodSandbox(uuid.uuid4().hex, f"/run/netns/{pod}", str(uuid.uuid4()), "default", "p")
    attached = handler.attach(prepared.undo, sandbox)
    seen = seen_in(pod, "net1")
    assert ADDRESS in seen.addresses and seen.up
    host = _host_links()
    assert vfs[1] not in host and vfs[0] in host  # the allocated VF, not another
    assert attached.network_data is not None and attached.network_data.ips == (ADDRESS,)
    handler.check(prepared.undo, sandbox, attached.state)
    handler.detach(prepared.undo, sandbox, attached.state)
    assert "net1" not in [ln.name for ln in ipjson.links(pod)]
    assert pcinics.vf_netdev(igb, 1) == vfs[1] and vfs[1] in _host_links()  # back, its name
    handler.unprepare(prepared.undo)


@pytest.mark.kernel("igb-sriov")
def test_a_network_naming_its_own_device_gets_the_allocated_one(igb, pod, tmp_path):
    """A NAD written for one node's NIC (`device`) is given the claim's VF instead: a
    claim reaches only the device the scheduler allocated to it."""
    vfs = pcinics.set_numvfs(igb, 2)
    text = _network({**_host_device(), "device": vfs[0]})
    handler, req = _request(igb, tmp_path, text, 1)
    handler.validate(req)
    prepared = handler.prepare(req)
    sandbox = PodSandbox(uuid.uuid4().hex, f"/run/netns/{pod}", str(uuid.uuid4()), "default", "p")
    attached = handler.attach(prepared.undo, sandbox)
    host = _host_links()
    assert vfs[0] in host and vfs[1] not in host
    handler.detach(prepared.undo, sandbox, attached.state)
    assert pcinics.vf_netdev(igb, 1) == vfs[1]


@pytest.mark.kernel("igb-sriov")
def test_a_vf_allocated_to_a_network_that_takes_no_device_is_refused(igb, tmp_path):
    """A bridge takes no device: a VF allocated to a bridge network is refused, naming
    the plugins (the VF would sit unused)."""
    pcinics.set_numvfs(igb, 1)
    text = _network({"type": "bridge", "bridge": "drtestbr0", "ipam": {"type": "static"}})
    handler, req = _request(igb, tmp_path, text, 0)
    with pytest.raises(ConfigError, match="no plugin of the network takes one") as err:
        handler.validate(req)
    assert err.value.issues[0][0] == "$.cni.config plugins"
