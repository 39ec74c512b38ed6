import json
import os
from pathlib import Path

import pytest

from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.records import (
    FORMAT,
    PREPARED,
    ClaimRecord,
    CorruptRecord,
    DeviceRecord,
    UnreadableRecord,
)
from dradriver.state.recordstore import RecordStore

UID = "3f1b7c2e-9a4d-4e8b-8c1f-2d5e6a7b8c9d"
UID2 = "4f1b7c2e-9a4d-4e8b-8c1f-2d5e6a7b8c9d"


def _record(uid=UID):
    return ClaimRecord(
        claim=ClaimRef("ns", "c", uid),
        phase=PREPARED,
        devices=[
            DeviceRecord(
                key="nic/netdev-virtual/s",
                request="nic",
                pool="node-a",
                device="netdev-virtual",
                share_id="s",
                type="netdev",
                kind="veth",
                undo={"interfaces": ["drc1"]},
                cdi_device_id="dra.example.com/netdev=x",
            )
        ],
        pod_uids=["p"],
        cdi_specs=["f.json"],
    )


def test_roundtrip_keeps_full_uid_and_exact_answer(tmp_path):
    store = RecordStore(tmp_path / "state")
    store.save(_record())
    loaded = store.load(UID)
    assert loaded == _record()
    doc = json.loads(Path(store.path(UID)).read_text())
    assert (doc["version"], doc["writer"]) == (1, FORMAT) and doc["claim"]["uid"] == UID
    assert doc["answer"] == [
        {
            "requestNames": ["nic"],
            "poolName": "node-a",
            "deviceName": "netdev-virtual",
            "cdiDeviceIds": ["dra.example.com/netdev=x"],
            "shareId": "s",
        }
    ]
    assert store.load(UID2) is None


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"phase": "prepared"}', b"[]", b'{"version": 1, "phase": "prepared"}'],
)
def test_corrupt_record_is_quarantined_with_reason(tmp_path, content):
    store = RecordStore(tmp_path)
    store.save(_record(UID2))
    Path(store.path(UID)).write_bytes(content)
    records, problems = store.load_all()
    assert [r.claim.uid for r in records] == [UID2]
    assert len(problems) == 1 and str(Path(store.path(UID))) in problems[0]
    assert (tmp_path / f"{UID}.alloc.json.corrupt").exists()
    assert not Path(store.path(UID)).exists()


def test_record_under_wrong_file_name_is_corrupt(tmp_path):
    store = RecordStore(tmp_path)
    Path(store.path(UID2)).write_bytes(_record(UID).to_json())
    with pytest.raises(CorruptRecord, match="file name says"):
        store.load(UID2)


def test_stale_temp_files_are_removed_at_load(tmp_path):
    store = RecordStore(tmp_path)
    (tmp_path / f".{UID}.alloc.json.tmp-1-2").write_text("partial")
    store.load_all()
    assert list(tmp_path.iterdir()) == []


# -- versions: an old and a new instance share the directory during a rolling update ----

# Exactly what format 1 (before `writer` existed) wrote for a prepared host-device claim.
FORMAT_1 = {
    "version": 1,
    "claim": {"namespace": "ns", "name": "c", "uid": UID},
    "phase": "prepared",
    "podUIDs": ["p"],
    "cdiSpecs": ["dra.example.com-netdev_" + UID + ".json"],
    "answer": [],
    "devices": [
        {
            "key": "nic/nic-eth1",
            "request": "nic",
            "pool": "node-a",
            "device": "nic-eth1",
            "share_id": None,
            "type": "netdev",
            "kind": "host-device",
            "undo": {"hostName": "eth1", "containerName": "net1", "mtu": 1500, "up": True,
                     "mac": "02:00:00:00:00:01", "expectedMac": "02:00:00:00:00:01",
                     "addresses": [], "added": []},
            "cdi_device_id": "dra.example.com/netdev=x",
            "container_interfaces": ["net1"],
            "created_interfaces": [],
            "host_interfaces": [],
            "network_data": None,
        }
    ],
}  # fmt: skip


def test_a_record_of_format_1_is_read_and_upgraded(tmp_path):
    store = RecordStore(tmp_path)
    Path(store.path(UID)).write_text(json.dumps(FORMAT_1))
    record = store.load(UID)
    assert record is not None and record.devices[0].undo["hostName"] == "eth1"
    assert record.extra == {} and record.devices[0].extra == {}


def test_fields_of_a_newer_writer_are_kept_when_the_record_is_written_back(tmp_path):
    store = RecordStore(tmp_path)
    newer = json.loads(json.dumps(FORMAT_1))
    newer |= {"writer": FORMAT + 1, "futureTop": {"a": 1}}
    newer["devices"][0]["futureDevice"] = [1, 2]
    Path(store.path(UID)).write_text(json.dumps(newer))
    record = store.load(UID)
    assert record is not None and record.extra == {"futureTop": {"a": 1}}
    store.save(record)  # e.g. an older instance re-preparing it after a reboot
    again = json.loads(Path(store.path(UID)).read_text())
    assert again["futureTop"] == {"a": 1} and again["devices"][0]["futureDevice"] == [1, 2]
    assert again["devices"][0]["undo"] == FORMAT_1["devices"][0]["undo"]


def test_a_record_only_a_newer_driver_can_use_is_left_untouched_and_reported(tmp_path):
    store = RecordStore(tmp_path)
    store.save(_record(UID2))
    content = json.dumps({**FORMAT_1, "version": FORMAT + 1, "writer": FORMAT + 3}).encode()
    Path(store.path(UID)).write_bytes(content)
    records, problems = store.load_all()
    assert [r.claim.uid for r in records] == [UID2]
    [problem] = problems
    assert f"readable from format {FORMAT + 1}" in problem and "left untouched" in problem
    assert Path(store.path(UID)).read_bytes() == content  # not renamed, not rewritten
    with pytest.raises(UnreadableRecord, match="newer driver"):
        store.load(UID)


def test_entries_that_are_not_files_are_quarantined_not_followed(tmp_path):
    store = RecordStore(tmp_path / "state")
    store.directory.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(_record(UID).to_json())
    Path(store.path(UID)).symlink_to(elsewhere)
    Path(store.path(UID2)).mkdir()
    fifo_uid = UID.replace("3f", "5f", 1)
    os.mkfifo(Path(store.path(fifo_uid)))
    store.save(_record(UID.replace("3f", "6f", 1)))
    records, problems = store.load_all()  # a FIFO must not block it
    assert len(records) == 1 and len(problems) == 3
    assert any("symbolic link" in p for p in problems)
    assert sum("not a regular file" in p for p in problems) == 2
    assert elsewhere.read_bytes() == _record(UID).to_json()  # the target is untouched
    assert sorted(
        p.name for p in store.directory.iterdir() if p.name.endswith(".corrupt")
    ) == sorted(f"{u}.alloc.json.corrupt" for u in (UID, UID2, fifo_uid))
