"""The invariants the fault suite checks after every fault (docs/crash-safety.md)."""

from __future__ import annotations

import json
from typing import Any

from dradriver.contract import naming, quantity
from dradriver.state import cdi
from tests.support.hosttools import run
from tests.support.runtime import links_in

DRIVER = "dra.example.com"


def prepared_records(driver: Any) -> dict[str, dict[str, Any]]:
    """claim UID -> record document, of the records in phase prepared."""
    out = {}
    for path in driver.state.glob("*.alloc.json"):
        doc = json.loads(path.read_text())
        if doc["phase"] == "prepared":
            out[doc["claim"]["uid"]] = doc
    return out


def check_invariants(ns: str, driver: Any) -> None:
    """No interface without a prepared record, no spec without a record, no record whose
    interfaces or specs are missing; every interface in the namespace is tagged as ours."""
    records = prepared_records(driver)
    assert not list(driver.state.glob("*.alloc.json.corrupt")), "a record was quarantined"
    present = {}
    for link in links_in(ns):
        tag = naming.parse_ifalias(link["alias"])
        assert tag is not None, f"untagged interface {link['name']} left behind"
        assert tag.claim_uid in records, f"{link['name']} of claim {tag.claim_uid} has no record"
        present[link["name"]] = tag.claim_uid
    for spec in driver.cdi.glob("*.json"):
        uid = cdi.claim_uid_of(spec, DRIVER)
        assert uid in records, f"spec {spec.name} has no prepared record"
    for uid, doc in records.items():
        for name in doc["cdiSpecs"]:
            assert (driver.cdi / name).is_file(), f"record {uid} names missing spec {name}"
        for device in doc["devices"]:
            for name in device["created_interfaces"]:
                assert present.get(name) == uid, f"record {uid} names missing interface {name}"
            given = (doc.get("capacity") or {}).get(device["key"], {}).get("bandwidth")
            if given is not None:  # both ways of its traffic held to what it was given
                rates = [_rate(ns, name) for name in device["created_interfaces"]]
                limits = [rate for rate in rates if rate is not None]
                assert limits == [quantity.parse(given)] * 2, (uid, rates)


def _rate(ns: str, link: str) -> int | None:
    """The rate of the link's root token bucket in bits per second (None: it has none)."""
    shown = run(
        ["ip", "netns", "exec", ns, "tc", "-j", "qdisc", "show", "dev", link, "root"],
        capture_output=True,
        text=True,
        check=True,
    )
    rates = [q["options"]["rate"] * 8 for q in json.loads(shown.stdout) if q["kind"] == "tbf"]
    return rates[0] if rates else None


def expected_answer(claim: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a prepare of one of the suite's veth claims must answer (deterministic)."""
    uid = claim["metadata"]["uid"]
    out = []
    for r in claim["status"]["allocation"]["devices"]["results"]:
        key = naming.device_key(r["request"], r["device"], r.get("shareID"))
        cdi_id = cdi.device_id(DRIVER, "netdev", uid, key)
        out.append(([r["request"]], r["pool"], r["device"], [cdi_id], r.get("shareID") or ""))
    return out


def answer_of(resp: Any, claim: dict[str, Any]) -> tuple[str, list[tuple[Any, ...]]]:
    """(error, devices) of one claim in a v1 prepare response."""
    entry = resp.claims[claim["metadata"]["uid"]]
    devices = [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids), d.share_id)
        for d in entry.devices
    ]
    return entry.error, devices
