import json

import pytest

from dradriver.hookspecs import ClaimRef
from dradriver.records import PREPARED, ClaimRecord, CorruptRecord, DeviceRecord, RecordStore

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
    doc = json.loads(store.path(UID).read_text())
    assert doc["version"] == 1 and doc["claim"]["uid"] == UID
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
    "content", [b"{not json", b'{"version": 99}', b"[]", b'{"version": 1, "phase": "prepared"}']
)
def test_corrupt_record_is_quarantined_with_reason(tmp_path, content):
    store = RecordStore(tmp_path)
    store.save(_record(UID2))
    store.path(UID).write_bytes(content)
    records, problems = store.load_all()
    assert [r.claim.uid for r in records] == [UID2]
    assert len(problems) == 1 and str(store.path(UID)) in problems[0]
    assert (tmp_path / f"{UID}.alloc.json.corrupt").exists()
    assert not store.path(UID).exists()


def test_record_under_wrong_file_name_is_corrupt(tmp_path):
    store = RecordStore(tmp_path)
    store.path(UID2).write_bytes(_record(UID).to_json())
    with pytest.raises(CorruptRecord, match="file name says"):
        store.load(UID2)


def test_stale_temp_files_are_removed_at_load(tmp_path):
    store = RecordStore(tmp_path)
    (tmp_path / f".{UID}.alloc.json.tmp-1-2").write_text("partial")
    store.load_all()
    assert list(tmp_path.iterdir()) == []
