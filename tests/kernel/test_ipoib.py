"""ipoib: validation everywhere; creation needs an InfiniBand port (none here, none in the VM:
soft-RoCE is Ethernet), so that test skips with the reason wherever no IB port exists."""

import pytest

from dradriver.base.errors import DriverError
from tests.support import kernel, netns
from tests.support.handlers import context, net_device, prepare
from tests.support.runtime import links_in

pytestmark = [pytest.mark.root]


@pytest.mark.kind("ipoib", fabricated=True)
def test_ipoib_refuses_a_parent_that_is_not_infiniband(in_ns):
    netns.ip(in_ns, "link", "add", "ib0", "type", "veth", "peer", "name", "x0")
    with pytest.raises(DriverError, match="ib0 is not an IPoIB interface"):
        prepare(
            {"type": "netdev", "netdev": {"kind": "ipoib", "parent": "ib0", "pkey": 0x10}},
            ctx=context(virtual_parents=("ib*",)),
        )
    assert {ln["name"] for ln in links_in(in_ns)} == {"ib0", "x0"}


@pytest.mark.kind("ipoib", fabricated=True)
@pytest.mark.parametrize(
    "netdev,path",
    [
        ({"kind": "ipoib"}, "'parent' is a required property"),
        ({"kind": "ipoib", "parent": "ib0", "pkey": 0x10000}, "$.netdev.pkey"),
        ({"kind": "ipoib", "parent": "ib0", "mode": "cm"}, "$.netdev.mode"),
        (
            {"kind": "ipoib", "parent": "ib0", "macAddress": "02:00:00:00:00:01"},
            "$.netdev.macAddress",
        ),
    ],
)
def test_ipoib_config_errors(netdev, path):
    with pytest.raises(DriverError, match=path.replace("$", r"\$").replace("[", r"\[")):
        prepare({"type": "netdev", "netdev": netdev}, ctx=context(virtual_parents=("ib*",)))


@pytest.mark.kind("ipoib")
@pytest.mark.kernel("infiniband")
def test_ipoib_child_on_a_real_infiniband_port():
    parent = kernel.infiniband_port()
    handler, _, prepared = prepare(
        {
            "type": "netdev",
            "netdev": {"kind": "ipoib", "parent": parent, "pkey": 0x10, "interfaceName": "ib1"},
        },
        ctx=context(virtual_parents=(parent,)),
    )
    host, container = net_device(prepared)
    assert container == "ib1"
    assert "pkey 0x8010" in netns.ip_host("-d", "link", "show", host)
    handler.unprepare(prepared.undo)
