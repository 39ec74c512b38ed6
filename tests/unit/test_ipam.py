"""Address pools: the operator's pools, choosing addresses, and claims taking and giving
them back through the prepare state machine (tests.support.statenode); the blocks of
cluster pools against a stand-in of the Lease API."""

from __future__ import annotations

import argparse
import ipaddress
import json
import subprocess
import sys
import threading
import uuid
from typing import Any

import pytest

from dradriver import settings
from dradriver.apiserver.ipamblocks import Blocks, lease_name
from dradriver.apiserver.kubeapi import ApiError
from dradriver.base.errors import DriverError
from dradriver.claims.ipam import AddressBook
from dradriver.contract import ipam
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.ipamstore import IpamStore
from tests.support.statenode import Node, claim_object, unprepare_one

POOL = '{"name": "data", "ranges": ["10.50.0.0/29"], "gateway": "10.50.0.1"}'


def _pool(text: str = POOL) -> ipam.Pool:
    [pool] = ipam.parse_pools(f"[{text}]").values()
    return pool


def test_a_pool_hands_out_its_range_but_the_edges_gateway_and_exclusions():
    pool = _pool('{"name": "data", "ranges": ["10.50.0.0/29"], "gateway": "10.50.0.1",'
                 ' "exclude": ["10.50.0.4/31"]}')  # fmt: skip
    assert ipam.free(pool, pool.ranges, set(), 8) == [
        "10.50.0.2/29",
        "10.50.0.3/29",
        "10.50.0.6/29",
    ]
    assert ipam.free(pool, pool.ranges, {"10.50.0.2"}, 1) == ["10.50.0.3/29"]
    v6 = _pool('{"name": "v6", "ranges": ["fd00:50::/126"]}')  # not the subnet-router anycast
    assert ipam.free(v6, v6.ranges, set(), 8) == [
        "fd00:50::1/126",
        "fd00:50::2/126",
        "fd00:50::3/126",
    ]
    wide = _pool('{"name": "w", "ranges": ["fd00:60::/64"], "exclude": ["fd00:60::/65"]}')
    assert ipam.free(wide, wide.ranges, set(), 1) == ["fd00:60:0:0:8000::/64"]  # stepped over


def test_a_cluster_pool_is_cut_into_blocks_of_its_block_size():
    pool = _pool('{"name": "data", "ranges": ["10.50.0.0/24"], "blockSize": 64}')
    assert [(i, str(b)) for i, b in pool.blocks()] == [
        (0, "10.50.0.0/26"), (1, "10.50.0.64/26"), (2, "10.50.0.128/26"), (3, "10.50.0.192/26"),
    ]  # fmt: skip
    assert str(pool.block(2)) == "10.50.0.128/26" and pool.block(4) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"name": "Data", "ranges": ["10.0.0.0/24"]}]', r"pool \[0\].name: 'Data' is not a name"),
        ('[{"name": "a", "ranges": []}]', "pool a.ranges: at least one range"),
        ('[{"name": "a", "ranges": ["10.0.0.1/24"]}]', "pool a.ranges\\[0\\]: .*host bits set"),
        ('[{"name": "a", "ranges": ["10.0.0.0/24"], "routes": ["10.9.0.0/16"]}]', "routes need"),
        ('[{"name": "a", "ranges": ["10.0.0.0/24"], "blockSize": 10}]', "blockSize: 10 is not"),
        ('[{"name": "a", "ranges": ["10.0.0.0/24"], "scope": "zone"}]', "scope: 'zone'"),
        ('[{"name": "a", "ranges": ["10.0.0.0/24"], "size": 1}]', "unknown field size"),
        ('[{"name": "a", "ranges": ["10.0.0.0/24"]}, {"name": "b", "ranges": ["10.0.0.128/25"]}]',
         "pool b.ranges: 10.0.0.128/25 overlaps 10.0.0.0/24 of pool a"),
        ('{"name": "a"}', "must be a list"),
    ],
)  # fmt: skip
def test_a_bad_pool_is_refused_naming_the_pool_and_field(text, message):
    with pytest.raises(ipam.PoolError, match=message):
        ipam.parse_pools(text)


def _settings(monkeypatch, pools: str, ranges: str):
    for var in ("DRA_IPAM_POOLS", "DRA_CLAIM_ADDRESS_RANGES"):
        monkeypatch.delenv(var, raising=False)
    parser = argparse.ArgumentParser()
    settings.add_flags(parser, run=False)
    argv = ["--node-name", "n", "--ipam-pools", pools, "--claim-address-ranges", ranges]
    return settings.from_args(parser.parse_args(argv))


def test_a_pool_outside_the_claim_address_ranges_stops_the_start(monkeypatch):
    assert _settings(monkeypatch, f"[{POOL}]", "10.50.0.0/16").ipam_pools == (_pool(),)
    with pytest.raises(SystemExit, match=r"pool data.ranges: 10.50.0.0/29 is not inside --claim"):
        _settings(monkeypatch, f"[{POOL}]", "10.60.0.0/16")
    with pytest.raises(SystemExit, match="--ipam-pools: not JSON"):
        _settings(monkeypatch, "[{", "10.50.0.0/16")


def test_a_pool_that_could_hand_out_a_node_address_is_named():
    pools = {"data": _pool()}
    used = [("10.50.0.3", "an address of this node (on eth1)"), ("10.50.0.1", "the gateway")]
    assert ipam.collisions(pools, used) == [
        "pool data could hand out 10.50.0.3, an address of this node (on eth1): exclude it "
        "(exclude: [...]) or choose another range"
    ]  # the pool's own gateway is never handed out


def test_a_pool_overlapping_the_clusters_own_ranges_is_named_with_the_range():
    pools = {"data": _pool(), "v6": _pool('{"name": "v6", "ranges": ["2001:db8::/64"]}')}
    cluster = [("10.50.0.0/24", "this node's pod range"), ("10.96.0.0/12", "the Service range"),
               ("fd00::/108", "the Service range"), ("bogus", "nothing")]  # fmt: skip
    assert ipam.overlaps(pools, cluster) == [
        (
            "data",
            "pool data's range 10.50.0.0/29 overlaps this node's pod range 10.50.0.0/24: a pod "
            "would get an address the cluster routes elsewhere; choose another range",
        )
    ]


class _ClusterApi:
    def __init__(self, node: Any, cidrs: Any) -> None:
        self.node, self.cidrs = node, cidrs

    def get_node(self, name: str) -> dict[str, Any]:
        if isinstance(self.node, Exception):
            raise self.node
        return {"metadata": {"name": name}, "spec": {"podCIDRs": self.node}}

    def list_at(self, path: str, query: Any) -> tuple[list[dict[str, Any]], str]:
        assert path == "/apis/networking.k8s.io/v1/servicecidrs"
        if isinstance(self.cidrs, Exception):
            raise self.cidrs
        return [{"spec": {"cidrs": self.cidrs}}], "1"


def test_the_clusters_ranges_are_read_where_the_driver_may():
    from dradriver.selfcheck import cluster_ranges

    api = _ClusterApi(["10.244.1.0/24"], ["10.96.0.0/12", "fd00::/108"])
    assert cluster_ranges(api, "n1") == [  # type: ignore[arg-type]
        ("10.244.1.0/24", "this node's pod range"),
        ("10.96.0.0/12", "the cluster's Service range"),
        ("fd00::/108", "the cluster's Service range"),
    ]
    forbidden = ApiError(403, "Forbidden", "servicecidrs is forbidden")
    api = _ClusterApi(None, forbidden)  # no pod range (no IPAM controller), no RBAC
    assert cluster_ranges(api, "n1") == []  # type: ignore[arg-type]


# -- claims on a node (the in-memory kernel, real files) -----------------------------------


def _add(node: Node, netdev: dict[str, Any]) -> ClaimRef:
    uid = str(uuid.uuid4())
    params = {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "net1", **netdev}}
    claim = claim_object(uid, "netdev-virtual", params, share=True)
    claim["metadata"]["name"] = f"c-{uid[:8]}"
    claim["status"]["reservedFor"][0]["uid"] = str(uuid.uuid4())  # a pod of its own
    node.api.fake.add_claim(claim)
    return ClaimRef("default", claim["metadata"]["name"], uid)


def _addresses(node: Node) -> dict[str, str]:
    doc = json.loads((node.state_dir / "ipam" / "pods.json").read_text())
    return {a: h["name"] for a, h in doc["addresses"].items()}


def test_claims_get_distinct_addresses_and_give_them_back(node: Node):
    preparer = node.preparer()
    first, second = (
        _add(node, {"ipam": {"pool": "pods"}}),
        _add(node, {"ipam": {"pool": "pods", "count": 2}}),
    )
    assert preparer.prepare([first])[first.uid].error is None
    out = preparer.prepare([second])
    assert out[second.uid].error is None
    assert _addresses(node) == {
        "198.51.100.131": first.name,
        "198.51.100.132": second.name,
        "198.51.100.133": second.name,
    }  # fmt: skip  (.128 the network, .129 the gateway, .130 excluded)
    record = json.loads((node.state_dir / f"{second.uid}.alloc.json").read_text())
    [device] = record["devices"]
    assert device["network_data"]["ips"] == ["198.51.100.132/29", "198.51.100.133/29"]
    # Prepared again (a repeated call): the same addresses, nothing new handed out.
    assert preparer.prepare([second])[second.uid].error is None
    assert len(_addresses(node)) == 3
    assert unprepare_one(preparer, first).error is None
    assert "198.51.100.131" not in _addresses(node)
    third = _add(node, {"ipam": {"pool": "pods"}})
    assert preparer.prepare([third])[third.uid].error is None
    assert _addresses(node)["198.51.100.131"] == third.name  # free again, so taken again


def test_an_exhausted_pool_is_an_error_naming_the_field_and_leaves_nothing(node: Node):
    preparer = node.preparer()
    refs = [_add(node, {"ipam": {"pool": "pods", "count": 2}}) for _ in range(3)]
    outcomes = [preparer.prepare([r])[r.uid] for r in refs]
    assert [o.error for o in outcomes[:2]] == [None, None]  # .131-.134 (.135 the broadcast)
    assert "$.netdev.ipam.pool: pool pods has no free address left on this node" in (
        outcomes[2].error or ""
    )
    assert not (node.state_dir / f"{refs[2].uid}.alloc.json").exists()
    assert refs[2].name not in _addresses(node).values()


@pytest.mark.parametrize(
    ("netdev", "message"),
    [
        ({"ipam": {"pool": "nope"}},
         "$.netdev.ipam.pool: no pool 'nope' on this node (pools: pods)"),
        ({"ipam": {"pool": "pods"}, "ipAddresses": ["198.51.100.7/24"]},
         "$.netdev.ipam: ipam and ipAddresses exclude each other"),
        ({"ipam": {"pool": "pods", "count": 9}}, "$.netdev.ipam.count"),
    ],
)  # fmt: skip
def test_a_bad_ipam_config_is_refused_naming_the_field(node: Node, netdev, message):
    ref = _add(node, netdev)
    error = node.preparer().prepare([ref])[ref.uid].error or ""
    assert f"request nic: {message}" in error or message in error, error
    assert set(node.kernel.table) == {"ens1", "ens2"} and node.files() == []


def test_a_static_address_inside_a_pool_is_refused_naming_the_field(node: Node):
    """A claim may not name an address a pool hands out: another claim would get it too.
    An address outside every pool's ranges is a claim's own."""
    preparer = node.preparer()
    taken = _add(node, {"ipam": {"pool": "pods"}})
    assert preparer.prepare([taken])[taken.uid].error is None  # 198.51.100.131
    files = node.files()
    for address in ("198.51.100.131/29", "198.51.100.134/24", "198.51.100.129/29"):
        ref = _add(node, {"ipAddresses": ["198.51.100.7/24", address]})
        error = preparer.prepare([ref])[ref.uid].error or ""
        assert (
            f"$.netdev.ipAddresses[1]: {address} is inside address pool pods "
            "(198.51.100.128/29), which hands its addresses to the claims that ask it"
        ) in error, error
        assert ref.name in error
        assert node.files() == files and len(node.kernel.table) == 4  # ens1, ens2, the pair
    own = _add(node, {"ipAddresses": ["198.51.100.7/24"]})
    assert preparer.prepare([own])[own.uid].error is None
    assert list(_addresses(node)) == ["198.51.100.131"]


def test_addresses_are_rebuilt_from_the_records_at_start(node: Node):
    ref = _add(node, {"ipam": {"pool": "pods"}})
    assert prepare_one_ref(node, ref) is None
    stale = {"addresses": {"198.51.100.134": {"claim": "gone", "key": "k"}}}  # a crash's
    (node.state_dir / "ipam" / "pods.json").write_text(json.dumps(stale))
    node.start()
    assert _addresses(node) == {"198.51.100.131": ref.name}


def prepare_one_ref(node: Node, ref: ClaimRef) -> str | None:
    return node.preparer().prepare([ref])[ref.uid].error


# -- blocks of cluster pools ------------------------------------------------------------------


class LeaseApi:
    """The Lease collection of one namespace, as the API server keeps it."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def request(
        self, method: str, path: str, body: Any = None, query: Any = None, **kw: Any
    ) -> Any:
        self.calls.append(method)
        if method == "GET":
            pool = query["labelSelector"].split("=")[1]
            return {
                "items": [
                    x for x in self.leases.values() if pool in x["metadata"]["labels"].values()
                ]
            }
        name = body["metadata"]["name"]
        if name in self.leases:
            raise ApiError(409, "AlreadyExists", f"leases {name} already exists")
        self.leases[name] = body
        return body

    def get_node(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": f"uid-{name}"}}


def test_two_nodes_never_hold_one_block_and_a_node_lists_its_own():
    api = LeaseApi()
    a, b = (Blocks(api, "dra.example.com", "dra-system", n) for n in ("node-a", "node-b"))
    assert a.take("data", range(4)) == 0
    assert b.take("data", range(4)) == 1  # block 0 is node-a's
    api.leases.pop(lease_name("dra.example.com", "data", 1))  # as if node-b raced...
    assert a.take("data", [1]) == 1
    assert a.held("data") == [0, 1] and b.held("data") == []
    lease = api.leases[lease_name("dra.example.com", "data", 0)]
    assert lease["spec"]["holderIdentity"] == "node-a"
    assert lease["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-a",
        "uid": "uid-node-a",
    }  # fmt: skip  (deleted with its Node object, and only then)


def test_a_cluster_pool_hands_out_addresses_only_from_blocks_the_node_holds(tmp_path):
    pool = _pool('{"name": "data", "ranges": ["10.50.0.0/28"], "blockSize": 4}')
    api = LeaseApi()
    Blocks(api, "dra.example.com", "dra-system", "node-b").take("data", [0])  # another node's
    blocks = Blocks(api, "dra.example.com", "dra-system", "node-a")
    book = AddressBook([pool], IpamStore(tmp_path), blocks)
    keeper, wanted = book._keeper, []
    assert keeper is not None
    keeper.want = wanted.append  # type: ignore[method-assign]  # served below, in this thread
    config = {"kind": "veth", "ipam": {"pool": "data", "count": 3}}
    ref = ClaimRef("default", "c", str(uuid.uuid4()))
    with pytest.raises(Exception, match="no free address in the blocks this node holds"):
        book.assign(ref, "k", config, "$.netdev")
    assert wanted == ["data"]
    keeper._serve(pool)  # what the block thread does when asked
    got = book.assign(ref, "k", config, "$.netdev")["ipAddresses"]
    block = pool.block(1)
    assert block is not None and len(got) == 3
    assert all(ipaddress.ip_interface(a).ip in block for a in got)  # not block 0: node-b's
    assert wanted == ["data", "data"]  # one address left in the block: room asked for ahead
    keeper._serve(pool)
    assert IpamStore(tmp_path).load("data").blocks == [1, 2]


def test_the_operator_lists_which_claim_has_which_address(node: Node):
    ref = _add(node, {"ipam": {"pool": "pods"}})
    assert prepare_one_ref(node, ref) is None
    argv = [sys.executable, "-m", "dradriver", "addresses", "--state-dir", str(node.state_dir)]
    listed = subprocess.run(argv, capture_output=True, text=True, check=True)  # (its own SIGPIPE)
    lines = listed.stdout.splitlines()
    assert lines[1].split() == ["pods", "198.51.100.131", f"default/{ref.name}", f"({ref.uid})"]


def test_a_block_whose_lease_went_is_taken_again_or_given_up(tmp_path):
    pool = _pool('{"name": "data", "ranges": ["10.50.0.0/28"], "blockSize": 4}')
    api = LeaseApi()
    blocks = Blocks(api, "dra.example.com", "dra-system", "node-a")
    book = AddressBook([pool], IpamStore(tmp_path), blocks)
    keeper = book._keeper
    assert keeper is not None
    keeper.want = lambda pool: None  # type: ignore[method-assign]
    keeper._serve(pool)
    assert blocks.take("data", [1]) == 1
    book.set_blocks("data", {0, 1})
    # The Node object was deleted and registered again: the garbage collector took the
    # Leases; meanwhile another node took block 1.
    api.leases.clear()
    Blocks(api, "dra.example.com", "dra-system", "node-b").take("data", [1])
    keeper._serve(pool)
    assert IpamStore(tmp_path).load("data").blocks == [0]  # 0 taken again; 1 is node-b's
    assert lease_name("dra.example.com", "data", 0) in api.leases


def test_a_block_lost_while_the_node_has_room_is_given_up_at_once(tmp_path):
    """The Lease watch's events: a block of the node's file that another node now holds,
    or whose Lease was deleted, is handed out from no more, at once (not when the node
    next runs short), and the claims still holding its addresses are reported."""
    pool = _pool('{"name": "data", "ranges": ["10.50.0.0/28"], "blockSize": 4}')
    api = LeaseApi()
    blocks = Blocks(api, "dra.example.com", "dra-system", "node-a")
    reports: list[tuple[str, str, dict[str, str]]] = []
    book = AddressBook(
        [pool], IpamStore(tmp_path), blocks,
        report=lambda level, reason, message, **f: reports.append((reason, message, f)),
    )  # fmt: skip
    keeper = book._keeper
    assert keeper is not None
    wanted: list[str] = []
    keeper.want = wanted.append  # type: ignore[method-assign]
    keeper._serve(pool)  # block 0
    ref = ClaimRef("default", "c", str(uuid.uuid4()))
    got = book.assign(ref, "k", {"ipam": {"pool": "data", "count": 2}}, "$.netdev")
    assert got["ipAddresses"] == ["10.50.0.1/28", "10.50.0.2/28"]  # block 0: .0-.3
    keeper._serve(pool)  # less than half a block left: block 1 too
    name = lease_name("dra.example.com", "data", 0)
    mine = api.leases[name]
    keeper._lease_event("MODIFIED", mine)  # its own Lease: nothing
    assert IpamStore(tmp_path).load("data").blocks == [0, 1] and reports == []
    # The Node was deleted and registered again; node-b took block 0 meanwhile.
    theirs = {**mine, "spec": {"holderIdentity": "node-b"}}
    keeper._lease_event("ADDED", theirs)
    assert IpamStore(tmp_path).load("data").blocks == [1]
    [(reason, message, fields)] = reports
    assert (
        reason == "IpamBlockLost" and "ipam block 0 of pool data is held by node node-b" in message
    )
    assert fields == {"claims": "default/c (10.50.0.1), default/c (10.50.0.2)"}
    assert wanted[-1] == "data"
    other = ClaimRef("default", "d", str(uuid.uuid4()))
    for _ in range(2):  # never from block 0 again
        got = book.assign(other, "k", {"ipam": {"pool": "data", "count": 2}}, "$.netdev")
        assert all(ipaddress.ip_interface(a).ip in pool.block(1) for a in got["ipAddresses"])
    keeper._lease_event("ADDED", theirs)  # told again: nothing more to give up
    assert len(reports) == 1
    # Its own Lease deleted (the Node object was): given up too.
    keeper._lease_event("DELETED", api.leases[lease_name("dra.example.com", "data", 1)])
    assert IpamStore(tmp_path).load("data").blocks == []
    assert "block 1 of pool data lost its Lease" in reports[-1][1]


def test_releases_side_by_side_lose_nothing(tmp_path):
    """An unprepare call's workers give back addresses of one pool at the same time."""
    book = AddressBook([_pool('{"name": "data", "ranges": ["10.50.0.0/24"], "scope": "node"}')],
                       IpamStore(tmp_path))  # fmt: skip
    refs = [ClaimRef("default", f"c{i}", str(uuid.uuid4())) for i in range(16)]
    for ref in refs:
        book.assign(ref, "k", {"ipam": {"pool": "data"}}, "$.netdev")
    threads = [threading.Thread(target=book.release, args=(r.uid,)) for r in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert IpamStore(tmp_path).load("data").addresses == {}


def test_a_pool_file_that_cannot_be_read_fails_the_prepare_and_start_rebuilds_it(node: Node):
    ref = _add(node, {"ipam": {"pool": "pods"}})
    (node.state_dir / "ipam").mkdir(parents=True)
    (node.state_dir / "ipam" / "pods.json").write_text("{torn")
    error = node.preparer().prepare([ref])[ref.uid].error or ""
    assert "pods.json: not the pool's addresses" in error and node.files() == ["ipam/pods.json"]
    other = _add(node, {"ipam": {"pool": "pods"}})
    assert prepare_one_ref(node.start() and node, other) is None
    assert _addresses(node) == {"198.51.100.131": other.name}


def test_an_unprepare_reads_only_the_pools_its_claim_took_addresses_of(tmp_path):
    """Claims without pool addresses (most) cost an unprepare no pool file read."""
    pools = [
        _pool(f'{{"name": "{n}", "ranges": ["10.5{i}.0.0/24"], "scope": "node"}}')
        for i, n in enumerate(("data", "other"))
    ]
    book = AddressBook(pools, IpamStore(tmp_path))
    ref = ClaimRef("default", "c", str(uuid.uuid4()))
    config = book.assign(ref, "k", {"ipam": {"pool": "data"}}, "$.netdev")
    (tmp_path / "ipam" / "other.json").write_text("{torn")  # read: an error
    book.release(str(uuid.uuid4()), {"k": {"ipAddresses": ["10.50.0.9/24"]}})  # no pool
    book.release(ref.uid, {"k": config})
    assert IpamStore(tmp_path).load("data").addresses == {}
    with pytest.raises(DriverError, match=r"other\.json"):
        book.release(ref.uid)  # no record: every pool is looked at


def test_a_claim_prepared_again_keeps_only_what_its_new_configs_hold(tmp_path):
    """An earlier preparation's address of a device (key) the claim no longer has goes;
    the new one's, and other claims', stay."""
    book = AddressBook([_pool('{"name": "data", "ranges": ["10.50.0.0/24"], "scope": "node"}')],
                       IpamStore(tmp_path))  # fmt: skip
    ref, other = (ClaimRef("default", n, str(uuid.uuid4())) for n in ("c", "d"))
    book.assign(ref, "old-key", {"ipam": {"pool": "data"}}, "$.netdev")
    new = book.assign(ref, "new-key", {"ipam": {"pool": "data"}}, "$.netdev")
    book.assign(other, "old-key", {"ipam": {"pool": "data"}}, "$.netdev")
    book.retain(ref.uid, {"new-key": new})
    held = IpamStore(tmp_path).load("data").addresses
    assert sorted((h.claim, h.key) for h in held.values()) == sorted(
        [(ref.uid, "new-key"), (other.uid, "old-key")]
    )
    assert new["ipAddresses"] == [f"{a}/24" for a, h in held.items() if h.claim == ref.uid]


def test_a_pool_overlapping_the_service_range_is_refused_on_the_node(tmp_path):
    """check_pools at start: the pool overlapping the Service range is refused, naming the
    range (its claims fail at prepare with that reason); the other pool serves."""
    from dradriver.selfcheck import Reporter, check_pools
    from tests.support.handlers import context

    pools = ipam.parse_pools(
        '[{"name": "svc", "ranges": ["10.96.8.0/24"]},'
        ' {"name": "ok", "ranges": ["10.198.18.0/24"]}]'
    )
    settings_ = settings.Settings(
        node_name="n1", ipam_pools=tuple(pools.values()), claim_address_ranges=("10.0.0.0/8",)
    )
    api = _ClusterApi(None, ["10.96.0.0/12"])
    refused = check_pools(settings_, context(), Reporter(None, None), api)  # type: ignore[arg-type]
    assert refused == {
        "svc": "pool svc's range 10.96.8.0/24 overlaps the cluster's Service range "
        "10.96.0.0/12: a pod would get an address the cluster routes elsewhere; choose "
        "another range"
    }
    book = AddressBook(pools.values(), IpamStore(tmp_path), refused=refused)
    with pytest.raises(DriverError, match=r"overlaps the cluster's Service range 10\.96\.0\.0/12"):
        book.assign(ClaimRef("default", "c", str(uuid.uuid4())), "k", {"ipam": {"pool": "svc"}},
                    "$.netdev")  # fmt: skip
