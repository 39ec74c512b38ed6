"""Checks of what the driver answered the kubelet and left on the node."""

from __future__ import annotations

import json
from typing import Any

from dradriver.contract import naming
from tests.support.cdischema import problems
from tests.support.driverproc import DRIVER, DriverProcess


def results(claim: dict[str, Any], driver: str = DRIVER) -> list[dict[str, Any]]:
    """The allocation results of `driver` in a claim."""
    devices = claim["status"]["allocation"]["devices"]
    return [r for r in devices["results"] if r["driver"] == driver]


def check_answer(resp: Any, claims: list[dict[str, Any]], driver: str = DRIVER) -> dict[str, Any]:
    """An entry for each of `claims`, without error and listing exactly the claim's
    allocation results of our driver (request, pool, device, share ID, one CDI ID).
    Returns those entries by claim UID."""
    out = {}
    for claim in claims:
        uid = claim["metadata"]["uid"]
        entry = resp.claims[uid]
        assert entry.error == "", entry.error
        got = sorted(
            (list(d.request_names), d.pool_name, d.device_name, d.share_id) for d in entry.devices
        )
        want = sorted(
            # The kubelet matches requests without a firstAvailable subrequest's suffix.
            ([r["request"].split("/")[0]], r["pool"], r["device"], r.get("shareID", ""))
            for r in results(claim, driver)
        )
        assert got == want
        for d in entry.devices:
            [cdi_id] = d.cdi_device_ids
            assert cdi_id.startswith(f"{driver}/netdev=") and uid in cdi_id
        out[uid] = entry
    return out


def spec_files(d: DriverProcess) -> dict[str, dict[str, Any]]:
    """The CDI specs in the driver's CDI directory, each valid for the upstream loader."""
    out = {}
    for path in sorted(d.cdi.glob("*.json")):
        spec = json.loads(path.read_text())
        assert problems(spec) == [], f"{path.name}: {problems(spec)}"
        out[path.name] = spec
    return out


def net_devices(spec: dict[str, Any]) -> dict[str, dict[str, str]]:
    """CDI device name -> its one netDevices entry."""
    out = {}
    for device in spec["devices"]:
        [nd] = device["containerEdits"]["netDevices"]
        out[device["name"]] = nd
    return out


def record_uids(d: DriverProcess) -> set[str]:
    """Claims with a committed record (phase prepared; journals of prepares under way are
    in phase preparing)."""
    out = set()
    for path in d.state.glob("*.alloc.json") if d.state.exists() else []:
        try:
            if json.loads(path.read_text())["phase"] == "prepared":
                out.add(path.name.split(".")[0])
        except (OSError, ValueError):
            continue  # replaced under us: read again next time
    return out


def record(d: DriverProcess, uid: str) -> dict[str, Any]:
    return dict(json.loads((d.state / naming.record_filename(uid)).read_text()))
