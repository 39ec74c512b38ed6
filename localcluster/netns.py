"""Running a thread inside a named network namespace (`ip netns`), briefly: a socket
made there belongs to that namespace for good (the API server forwarders, the probes
of components that listen in a node's namespace)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from dradriver.kernel import netlink, nsfs

NETNS_DIR = "/run/netns"


@contextmanager
def inside(name: str) -> Iterator[None]:
    """Run this thread inside namespace `name` (netlink sockets reopen there)."""
    original = nsfs.current_netns()
    target = nsfs.open_netns(f"{NETNS_DIR}/{name}")
    netlink.close()
    try:
        nsfs.setns(target)
        yield
    finally:
        netlink.close()
        nsfs.setns(original)
        os.close(target)
        os.close(original)
