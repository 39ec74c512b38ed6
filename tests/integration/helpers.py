"""Claim builders and checks shared by the integration tests."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.support.cdischema import problems
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.runtime import links_in

# The documentation ranges, allowed for claims' addresses (--claim-address-ranges).
DOC_RANGES = "192.0.2.0/24,198.51.100.0/24,203.0.113.0/24,2001:db8::/32"


def veth_claim(
    name: str = "c1",
    *,
    interface: str = "net1",
    extra: dict[str, Any] | None = None,
    request: str = "nic",
    pods: list[str] | None = None,
    bandwidth: str | None = None,
) -> dict[str, Any]:
    """A claim allocated on the shared virtual device with a veth config (given
    `bandwidth` of the device by the scheduler, when set)."""
    netdev = {"kind": "veth", "interfaceName": interface, **(extra or {})}
    result = {
        "request": request,
        "pool": "node-a",
        "device": "netdev-virtual",
        "shareID": str(uuid.uuid4()),
    }
    if bandwidth is not None:
        result["consumedCapacity"] = {"slots": "1", "bandwidth": bandwidth}
    return allocated_claim(
        name,
        [result],
        config=[opaque({"type": "netdev", "netdev": netdev})],
        pods=pods,
    )


def answer(resp: Any, claim: dict[str, Any]) -> Any:
    """The response entry of one claim (asserting it is there)."""
    uid = claim["metadata"]["uid"]
    assert uid in resp.claims, f"no entry for {uid}"
    return resp.claims[uid]


def specs(cdi_dir: Path) -> dict[str, dict[str, Any]]:
    """CDI spec files in the directory, checked against the upstream loader rules."""
    out = {}
    for path in sorted(cdi_dir.glob("*.json")):
        spec = json.loads(path.read_text())
        assert problems(spec) == [], f"{path.name}: {problems(spec)}"
        out[path.name] = spec
    return out


def nothing_left(ns: str, driver: Any) -> None:
    """No interface in the namespace, no CDI spec, no record, no pod index entry."""
    assert links_in(ns) == []
    assert list(driver.cdi.glob("*.json")) == []
    left = list(driver.state.rglob("*")) if driver.state.exists() else []
    assert left == [], left
