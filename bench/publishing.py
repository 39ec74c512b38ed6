"""Figure 4: building and publishing the ResourceSlice for 0, 64 and 512 devices."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dradriver.apiserver import slices
from dradriver.apiserver.inventory import Inventory
from dradriver.apiserver.kubeapi import KubeApi
from dradriver.apiserver.publisher import Publisher
from dradriver.contract.registry import HandlerRegistry
from tests.support.fakeapi import FakeApi
from tests.support.fakesys import FakeSys
from tests.support.handlers import context


def _tree(root: Path, n: int) -> None:
    fs = FakeSys(root)
    for i in range(n):
        fs.nic(
            f"ens{i}",
            f"0000:{i // 32:02x}:{i % 32:02x}.0",
            mac=f"02:00:00:00:{i // 256:02x}:{i % 256:02x}",
        )


def publishing(sizes: tuple[int, ...], runs: int) -> list[dict[str, Any]]:
    """Time to discover and build the slices, their size on the wire, and a full publish."""
    rows = []
    registry = HandlerRegistry()
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            _tree(Path(d), n)
            ctx = context(sysfs_root=Path(d), parent_interfaces=("ens*",))
            inventory = Inventory(registry, ctx)
            builds = []
            for _ in range(runs):
                start = time.perf_counter()
                built = slices.build_slices(
                    "dra.example.com", "node-a", "uid", inventory.refresh(), generation=1
                )
                builds.append(time.perf_counter() - start)
            wire = sum(len(json.dumps(s).encode()) for s in built)
            fake = FakeApi()
            fake.add_node("node-a")
            with fake.serving() as url:
                cfg_path = fake.kubeconfig(url, Path(d) / "kubeconfig")
                api = KubeApi(str(cfg_path))
                publisher = Publisher(api, inventory, "dra.example.com", "node-a", 600)
                start = time.perf_counter()
                publisher.publish(force=True)
                first = time.perf_counter() - start
                start = time.perf_counter()
                publisher.publish(force=True)
                unchanged = time.perf_counter() - start
        rows.append(
            {
                "devices": n,
                "slices": len(built),
                "build_ms": statistics.median(builds) * 1e3,
                "bytes": wire,
                "first_publish_ms": first * 1e3,
                "unchanged_check_ms": unchanged * 1e3,
            }
        )
    return rows
