import re
import uuid

from dradriver.contract import naming

UID = "3f1b7c2e-9a4d-4e8b-8c1f-2d5e6a7b8c9d"
CDI_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


def test_host_ifname_is_15_bytes_deterministic_and_tagged_by_shape():
    name = naming.host_ifname(UID, "nic/netdev-virtual/abc")
    assert len(name.encode()) == 15
    assert name == naming.host_ifname(UID, "nic/netdev-virtual/abc")
    assert naming.is_host_ifname(name)
    assert not naming.is_host_ifname("eth0")


def test_host_ifname_uses_the_whole_uid_not_a_prefix():
    # Two UIDs sharing their first 30 characters must not collide.
    a = UID[:30] + "000000"
    b = UID[:30] + "000001"
    assert naming.host_ifname(a, "k") != naming.host_ifname(b, "k")


def test_host_ifname_differs_by_key_and_role():
    names = {naming.host_ifname(UID, k, r) for k in ("a", "b") for r in ("c", "h")}
    assert len(names) == 4


def test_no_collisions_over_many_claims():
    names = {naming.host_ifname(str(uuid.uuid4()), "nic/netdev-virtual") for _ in range(20000)}
    assert len(names) == 20000


def test_ifalias_roundtrip_and_foreign_aliases():
    owner = naming.owner_id("dra.example.com", "/etc/cdi/dra.example.com-state")
    alias = naming.ifalias(owner, UID, "nic/netdev-virtual/x")
    assert naming.parse_ifalias(alias) == (UID, "nic/netdev-virtual/x", owner)
    assert naming.parse_ifalias("uplink to switch 3") is None
    assert naming.parse_ifalias(None) is None
    assert naming.parse_ifalias(alias + "\n") is None
    assert len(alias.encode()) < 256  # IFALIASZ
    # A tag written before owners were tagged still reads, with no owner.
    legacy = f"dra-driver claim={UID} nic/netdev-virtual/x"
    assert naming.parse_ifalias(legacy) == (UID, "nic/netdev-virtual/x", None)


def test_owner_is_the_driver_name_and_the_state_directory():
    a = naming.owner_id("dra.example.com", "/etc/cdi/dra.example.com-state")
    assert a == naming.owner_id("dra.example.com", "/etc/cdi/dra.example.com-state")
    assert a != naming.owner_id("dra.example.org", "/etc/cdi/dra.example.com-state")
    assert a != naming.owner_id("dra.example.com", "/tmp/canary-state")


def test_cdi_device_name_is_valid_and_unique_per_share():
    a = naming.cdi_device_name(UID, naming.device_key("nic", "netdev-virtual", "s1"))
    b = naming.cdi_device_name(UID, naming.device_key("nic", "netdev-virtual", "s2"))
    assert CDI_NAME.match(a) and CDI_NAME.match(b) and a != b
    assert UID in a


def test_published_device_name_is_a_dns_label_without_collisions():
    assert naming.published_device_name("nic", "eth1") == "nic-eth1"
    a = naming.published_device_name("rdma", "mlx5_0")
    b = naming.published_device_name("rdma", "mlx5-0")
    assert naming.is_dns_label(a) and naming.is_dns_label(b) and a != b
    long = naming.published_device_name("vf", "x" * 100)
    assert naming.is_dns_label(long)


def test_claim_uid_validation_rejects_path_tricks():
    assert naming.is_claim_uid(UID)
    for bad in ("../../etc/passwd", UID.upper(), UID + "/x", "", "a" * 36):
        assert not naming.is_claim_uid(bad)


def test_whole_string_checks_refuse_a_trailing_newline():
    assert not naming.is_claim_uid(UID + "\n")
    assert not naming.is_dns_label("default\n") and not naming.is_dns_subdomain("node-a\n")
    name = naming.host_ifname(UID, "k")
    assert naming.is_host_ifname(name) and not naming.is_host_ifname(name + "\n")
    alias = naming.ifalias("0123456789ab", UID, "nic/netdev-virtual")
    assert naming.parse_ifalias(alias) is not None and naming.parse_ifalias(alias + "\n") is None


def test_kubernetes_names_refuse_path_tricks():
    for bad in ("..", ".", "a/b", "a%2Fb", "A", "-a", "a" * 64, "", "a b"):
        assert not naming.is_dns_label(bad), bad
    for bad in ("..", "a/b", "a..b", ".a", "a" * 254):
        assert not naming.is_dns_subdomain(bad), bad
    assert naming.is_dns_subdomain("claim-1.x") and naming.is_dns_label("default")
