"""Fixtures of the kernel tests."""

from collections.abc import Iterator

import pytest

from dradriver.kernel.rtnl.client import RtnlKernel
from tests.support import ipjson, netns


@pytest.fixture
def pod() -> Iterator[str]:
    """A namespace standing for a pod's sandbox; deleted after the test."""
    name = netns.create("pod")
    yield name
    netns.delete(name)


@pytest.fixture
def kernel(in_ns: str) -> Iterator[RtnlKernel]:
    """A backend whose socket lives in the test's namespace."""
    backend = RtnlKernel(timeout=2.0)
    yield backend
    backend.close()


@pytest.fixture
def node(in_ns: str) -> str:
    """The namespace with a veth pair a0/b0 (a0 up, tagged, addressed) and a bridge br0."""
    for line in (
        "link add a0 type veth peer name b0",
        "link set a0 mtu 1400 address 02:00:5e:10:00:01 alias dra:test up",
        "link add br0 type bridge",
        "addr add 10.9.0.1/24 dev a0",
        "addr add fd00:9::1/64 dev a0 nodad",
        "addr add 10.7.0.1 peer 10.7.0.2/32 dev a0",
    ):
        netns.ip(in_ns, *line.split())
    return in_ns


def index(ns: str, name: str) -> int:
    """The index of link `name` in namespace `ns`, as ip reads it."""
    return int(ipjson.link_info(ns, name)["ifindex"])
