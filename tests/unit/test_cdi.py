import json
from pathlib import Path

import pytest

from dradriver.contract import naming
from dradriver.state import cdi
from tests.support.cdischema import problems

UID = "3f1b7c2e-9a4d-4e8b-8c1f-2d5e6a7b8c9d"


def test_netdev_spec_passes_the_upstream_schema_and_strict_rules():
    spec = cdi.build_spec(
        "dra.example.com",
        "netdev",
        [
            (f"{UID}-nic", {"netDevices": [{"hostInterfaceName": "drcabc", "name": "net1"}]}),
        ],
    )
    assert problems(spec) == []
    assert spec["cdiVersion"] == "1.1.0"
    assert spec["kind"] == "dra.example.com/netdev"


def test_rdma_spec_with_device_nodes_and_env_passes():
    spec = cdi.build_spec(
        "dra.example.com",
        "rdma",
        [
            (
                f"{UID}-rdma",
                {
                    "deviceNodes": [{"path": "/dev/infiniband/uverbs0"}],
                    "env": ["DRA_RDMA_DEVICE=mlx5_0"],
                },
            ),
        ],
    )
    assert problems(spec) == []


def test_checker_catches_what_the_loader_rejects():
    bad = {
        "cdiVersion": "1.0.0",
        "kind": "dra.example.com/netdev",
        "extra": 1,
        "devices": [
            {
                "name": "-x",
                "containerEdits": {
                    "netDevices": [
                        {"hostInterfaceName": "a", "name": ""},
                        {"hostInterfaceName": "a", "name": "b"},
                    ]
                },
            }
        ],
    }
    found = " ".join(problems(bad))
    for reason in (
        "unknown field extra",
        "cannot hold netDevices",
        "bad device name",
        "empty name",
        "duplicate netDevice",
    ):
        assert reason in found


def test_empty_edits_are_refused():
    with pytest.raises(ValueError, match="empty containerEdits"):
        cdi.build_spec("dra.example.com", "netdev", [("x", {"netDevices": []})])


def test_write_is_atomic_and_named_per_claim(tmp_path):
    name = naming.cdi_spec_filename("dra.example.com", "netdev", UID)
    path = Path(cdi.spec_file(tmp_path, name))
    assert path.name == f"dra.example.com-netdev_{UID}.json"
    spec = cdi.build_spec("dra.example.com", "netdev", [("n", {"env": ["A=1"]})])
    cdi.write_spec(path, spec)
    assert json.loads(path.read_text()) == spec
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    assert cdi.claim_uid_of(path, "dra.example.com") == UID
    assert cdi.claim_uid_of(tmp_path / "other-vendor_x.json", "dra.example.com") is None
    assert cdi.remove_claim_specs(tmp_path, "dra.example.com", UID) == [str(path)]
    assert not path.exists()


def test_named_specs_of_a_claim_are_removed_and_nothing_else(tmp_path):
    uid, other = "5a0c6f5e-0000-4000-8000-000000000001", "5a0c6f5e-0000-4000-8000-000000000002"
    names = [f"dra.example.com-netdev_{uid}.json", f"dra.example.com-netdev_{other}.json",
             "someone-else.json"]  # fmt: skip
    for name in names:
        (tmp_path / name).write_text("{}")
    cdi.remove_named_specs(tmp_path, "dra.example.com", uid, [*names, "../x.json", names[0]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])
