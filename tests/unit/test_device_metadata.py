"""Device metadata files (KEP-5304) of prepared claims: the layout, format and CDI mount
k8s.io/dynamic-resource-allocation defines for Go drivers, written before the commit,
restored from the record, removed with the claim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dradriver.base.errors import DriverError
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state import metadata
from tests.support.statenode import (
    DRIVER,
    UID,
    Node,
    add_claim,
    prepare_one,
    unprepare_one,
)

TEMPLATE_PATH = (
    "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/uplink/nic/"
    "dra.example.com-metadata.json"
)


def stream(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a metadata file, in order (as a Go json.Decoder reads them)."""
    text, out, decoder, at = path.read_text(), [], json.JSONDecoder(), 0
    while at < len(text.rstrip()):
        obj, end = decoder.raw_decode(text, at)
        out.append(obj)
        at = end + (len(text[end:]) - len(text[end:].lstrip()))
    return out


def from_template(node: Node, pod_claim: str = "uplink") -> None:
    """The veth claim, made from a template: its pod names it `pod_claim`."""
    add_claim(node, "veth")
    claim = node.api.fake.claims[("default", "c")]
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim}


def test_a_prepared_claim_has_its_file_and_a_read_only_mount_at_the_standard_path(node):
    from_template(node)
    outcome = prepare_one(node.preparer())
    assert outcome.error is None
    path = node.plugin_dir / f"dra-device-metadata/default_c_{UID}/nic/metadata.json"
    beta, alpha = stream(path)
    assert (beta["apiVersion"], alpha["apiVersion"]) == (
        "metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1",
    )  # fmt: skip
    assert {k: v for k, v in beta.items() if k != "apiVersion"} == {
        k: v for k, v in alpha.items() if k != "apiVersion"
    }
    assert beta["kind"] == "DeviceMetadata"
    assert beta["metadata"] == {"name": "c", "namespace": "default", "uid": UID, "generation": 1}
    assert beta["podClaimName"] == "uplink"
    [request] = beta["requests"]
    assert request["name"] == "nic"
    [device] = request["devices"]
    assert (device["driver"], device["pool"], device["name"]) == (
        DRIVER, "node-a", "netdev-virtual",
    )  # fmt: skip
    assert device["attributes"]["kind"] == {"string": "virtual"}
    nd = device["networkData"]
    assert nd["interfaceName"] == "net1"
    assert nd["ips"] == ["198.51.100.7/24", "2001:db8::7/64"]
    assert nd["hardwareAddress"]
    [spec] = [json.loads(p.read_text()) for p in node.cdi_dir.glob("*.json")]
    [cdi_device] = spec["devices"]
    assert cdi_device["containerEdits"]["mounts"] == [
        {"hostPath": str(path), "containerPath": TEMPLATE_PATH, "options": ["ro", "bind"]}
    ]
    assert unprepare_one(node.preparer()).error is None
    assert not (node.plugin_dir / f"dra-device-metadata/default_c_{UID}").exists()


def test_a_claim_the_pod_names_itself_shows_under_its_own_name(node):
    add_claim(node, "macvlan")
    assert prepare_one(node.preparer()).error is None
    [spec] = [json.loads(p.read_text()) for p in node.cdi_dir.glob("*.json")]
    [mount] = spec["devices"][0]["containerEdits"]["mounts"]
    assert mount["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/nic/"
        "dra.example.com-metadata.json"
    )
    [doc, _] = stream(Path(mount["hostPath"]))
    assert "podClaimName" not in doc
    assert doc["requests"][0]["devices"][0]["networkData"]["interfaceName"] == "data0"


def test_a_file_that_went_away_is_written_again_from_the_record(node):
    from_template(node)
    assert prepare_one(node.preparer()).error is None
    path = node.plugin_dir / f"dra-device-metadata/default_c_{UID}/nic/metadata.json"
    before = stream(path)
    path.unlink()
    assert prepare_one(node.start()).error is None  # a restart: reconciled from the record
    assert stream(path) == before  # the record keeps the pod's claim name too


def test_a_claim_prepared_again_gets_a_newer_generation(node):
    from_template(node)
    preparer = node.preparer()
    assert prepare_one(preparer).error is None
    record = preparer.records.load(UID)
    assert record is not None
    again = preparer.lifecycle.prepare_again(record)
    path = node.plugin_dir / f"dra-device-metadata/default_c_{UID}/nic/metadata.json"
    assert [d["metadata"]["generation"] for d in stream(path)] == [2, 2]
    assert again.pod_claim_name == "uplink"


def test_metadata_of_a_claim_no_record_holds_is_removed_at_start(node):
    stray = node.plugin_dir / f"dra-device-metadata/default_gone_{UID}/nic/metadata.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    node.start()
    assert not stray.parent.parent.exists()


@pytest.mark.parametrize(
    "ref,request_name",
    [
        (ClaimRef("../etc", "c", UID), "nic"),
        (ClaimRef("default", "c/../../x", UID), "nic"),
        (ClaimRef("default", "c", UID), "../nic"),
        (ClaimRef("default", "c", "../../x"), "nic"),
    ],
)
def test_names_that_would_leave_the_directory_are_refused(tmp_path, ref, request_name):
    with pytest.raises(DriverError):
        metadata.host_path(tmp_path, ref, request_name)


def test_a_metadata_file_that_cannot_be_written_again_never_costs_the_claim(node, monkeypatch):
    from dradriver.claims import devicemeta

    from_template(node)
    assert prepare_one(node.preparer()).error is None
    links = node.links()
    (node.plugin_dir / f"dra-device-metadata/default_c_{UID}/nic/metadata.json").unlink()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(devicemeta, "write", full)
    preparer = node.start()  # start-up: the file is gone and cannot be written
    assert node.links() == links  # the claim's interfaces are kept
    record = preparer.records.load(UID)
    assert record is not None and record.phase == "prepared"
    assert prepare_one(preparer).error is None  # and its prepare still answers


def test_a_claims_files_go_by_their_requests_and_anything_else_by_a_walk(tmp_path):
    claim = ClaimRef("default", "c", UID)
    for request in ("nic", "rdma"):
        metadata.write(metadata.host_path(tmp_path, claim, request), {"kind": "DeviceMetadata"})
    metadata.remove_claim(tmp_path, claim, ["nic", "rdma/sub", "nic"])
    assert not metadata.claim_dir(tmp_path, claim).exists()
    # A file the requests do not name stops the direct removal: the walk takes it all.
    metadata.write(metadata.host_path(tmp_path, claim, "nic"), {"kind": "DeviceMetadata"})
    (metadata.claim_dir(tmp_path, claim) / "nic" / "stray").write_text("x")
    metadata.remove_claim(tmp_path, claim, ["nic"])
    assert not metadata.claim_dir(tmp_path, claim).exists()
    # A request name that is no DNS label never makes a path: the walk again.
    metadata.write(metadata.host_path(tmp_path, claim, "nic"), {"kind": "DeviceMetadata"})
    metadata.remove_claim(tmp_path, claim, [".."])
    assert not metadata.claim_dir(tmp_path, claim).exists()
    assert (tmp_path / metadata.SUBDIR).is_dir()  # its parent stays
    metadata.remove_claim(tmp_path, claim, ["nic"])  # nothing there: no error
