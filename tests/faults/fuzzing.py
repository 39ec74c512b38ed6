"""Adversarial opaque configs for the property tests, with what each one must be refused for.

A generated config is a `Case`: the parameters object and, as an oracle kept apart from
the driver's code (written from docs/configuration.md's opaque config reference), the JSON paths the
driver must name: `form` (anywhere: the schema, `dra-driver validate-config`) and `node`
(at prepare, on the fuzz node below: outside its ranges, or what the node uses). A case
with `exact` set was built only from values whose verdict is known, so it must be
accepted when both sets are empty; otherwise (junk, wrong types, deep nesting) only the
general properties hold: no crash, every error names a path.

Values are structured, not only random: names with control characters, `%`, 16 bytes,
unicode; addresses of every special range and odd spellings; huge, negative, float and
bool numbers; wrong types; unknown fields; deep nesting.
"""

from __future__ import annotations

import ipaddress
import os
import reprlib
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

# -- how much ------------------------------------------------------------------------------


def examples(default: int, share: int = 1) -> int:
    """Examples for one property: `default`, or DRA_FUZZ_EXAMPLES divided by `share` (the
    slow properties, subprocesses and the real daemon, take a share of a long run)."""
    wanted = os.environ.get("DRA_FUZZ_EXAMPLES", "").strip()
    return max(default, int(wanted) // share) if wanted else default


def fuzz(default: int, share: int = 1, *, shared_fixture: bool = False) -> settings:
    """Seeded (derandomized), no deadline (timings belong in `make bench`), no database."""
    checks = [HealthCheck.too_slow, HealthCheck.data_too_large]
    if shared_fixture:  # one daemon serves every example; each cleans up after itself
        checks.append(HealthCheck.function_scoped_fixture)
    return settings(
        max_examples=examples(default, share),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=checks,
        print_blob=True,
    )


def tally(label: str) -> None:
    """Count an outcome in hypothesis' statistics (--hypothesis-show-statistics)."""
    if currently_in_test_context():
        event(label)


# A JSON path as the driver writes it: $, .name, [index], ["any key"].
JSON_PATH = r'\$(?:\.[A-Za-z_][A-Za-z0-9_]*|\[(?:[0-9]+|"(?:[^"\\]|\\.)*")\])*'

# -- the fuzz node ---------------------------------------------------------------------------

# The node of the prepare properties: an uplink with 192.0.2.5/24 and 2001:db8::5/64
# (so 192.0.2.255 is its broadcast address) and default routes via GATEWAYS; macvlan
# parent PARENT with MTU 1500; a NIC handed out whole (host-device) with MTU limit
# NIC_MAX_MTU; claims may use RANGES (192.0.2.0/24 overlaps the node's own network on
# purpose: what the node uses there must still be refused).
RANGES = ("192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32")
NODE_ADDRESSES = ("192.0.2.5", "2001:db8::5")
GATEWAYS = ("192.0.2.254", "2001:db8::fffe")
TAKEN = (*NODE_ADDRESSES, *GATEWAYS, "192.0.2.255")
PARENT_MTU, NIC_MAX_MTU = 1500, 9000

# -- values ------------------------------------------------------------------------------------

_NAME_CHARS = [chr(c) for c in range(0x21, 0x7F) if chr(c) not in "/:%"]
GOOD_NAMES = st.one_of(
    st.sampled_from(["eth1", "net1", "data0", "x" * 15, "net-1", "n.1", "...", "default0", "lo0"]),
    st.text(_NAME_CHARS, min_size=1, max_size=15).filter(
        lambda n: n not in ("lo", "eth0", "all", "default", ".", "..")
    ),
)
BAD_NAMES = st.one_of(
    st.sampled_from(
        [
            "",
            "eth0",  # every pod's own interface
            "lo",
            ".",
            "..",
            "all",
            "default",
            "eth1\n",
            "eth1\r",
            "\neth1",
            "net%d",
            "%",
            "a" * 16,
            "é",
            "\uff45\uff54\uff481",  # full-width "eth"
            "e th",
            "a/b",
            "a:b",
            "\x00",
            "eth\t1",
            "ab\u200b",
            "eth1\x7f",
        ]
    ),
    st.text(_NAME_CHARS, min_size=16, max_size=40),
    st.tuples(
        st.text(_NAME_CHARS, max_size=6),
        st.sampled_from(list("/:% \t\n\r\x00\x0b\x1b\x7féλ\u2028")),
        st.text(_NAME_CHARS, max_size=6),
    ).map("".join),
)
GOOD_MACS = st.one_of(
    st.sampled_from(["02:00:00:00:00:01", "0C:42:A1:00:00:01", "00:00:00:00:00:01"]),
    st.tuples(st.integers(0, 127).map(lambda b: b * 2), st.binary(min_size=5, max_size=5))
    .map(lambda t: ":".join(f"{b:02x}" for b in bytes([t[0]]) + t[1]))
    .filter(lambda mac: mac != "00:00:00:00:00:00"),
)
BAD_MACS = st.one_of(
    st.sampled_from(
        [
            "01:00:5e:00:00:01",
            "ff:ff:ff:ff:ff:ff",
            "00:00:00:00:00:00",
            "33:33:00:00:00:01",
            "02-00-00-00-00-01",
            "02:00:00:00:00",
            "02:00:00:00:00:01\n",
            "0200.0000.0001",
            "02:00:00:00:00:0g",
            "02:00:00:00:00:001",
            "",
        ]
    ),
    st.tuples(st.integers(0, 127).map(lambda b: b * 2 + 1), st.binary(min_size=5, max_size=5)).map(
        lambda t: ":".join(f"{b:02x}" for b in bytes([t[0]]) + t[1])
    ),
)
GOOD_MTUS = st.integers(68, 65535)
# docs/configuration.md: an integer is a JSON integer (as the API server reads one): 1500.0 is not.
BAD_NUMBERS = st.sampled_from(
    [0, 67, -1, 65536, 2**31, 2**64, 10**30, 1.5, 1500.0, 9000.0, True, False, 1e300]
)
WRONG_TYPES = st.sampled_from([None, [], {}, [1500], {"mtu": 1}, True])  # for any field
NUMBER_STRINGS = st.sampled_from(["1500", "", "null", "0x5dc", "1e3"])  # for number fields

# Addresses: (text, refused anywhere, refused on the fuzz node).
FORM_BAD_ADDRESSES = [
    "fe80::1%eth0/64",
    "0.0.0.0/0",
    "224.0.0.1/32",
    "198.51.100.7/255.255.255.0",
    "198.51.100.7/0.0.0.255",
    "198.51.100.7/24\n",
    "127.0.0.1/8",
    "169.254.169.254/32",
    "255.255.255.255/32",
    "240.0.0.1/4",
    "0.0.0.5/8",
    "::1/128",
    "::/0",
    "::ffff:192.0.2.1/128",
    "::ffff:c000:201/128",
    "fe80::5/64",
    "ff02::1/128",
    "2001:DB8::1/64",
    "2001:db8:0::1/64",
    "198.51.100.010/24",
    "198.51.100.7/024",
    "198.51.100.7",
    "198.51.100.7/33",
    "2001:db8::7/129",
    "198.51.100.0/24",
    "198.51.100.255/24",
    "2001:db8::/64",
    " 198.51.100.7/24",
    "198.51.100.7 /24",
    "198.51.100.7//24",
    "198.51.100.7/",
    "/24",
    "",
    "x",
    "1.2.3.4.5/24",
    "2001:db8::1::2/64",
    "198.51.100.7/0",
    "198.51.100.7/+24",
    "198.51.100.7/\uff12\uff14",  # full-width digits
]
OUT_OF_RANGE = ["10.1.2.3/24", "203.0.113.7/24", "fd00::7/64", "100.64.0.1/10", "8.8.8.8/32"]
NODE_USED = [
    "192.0.2.5/24",
    "192.0.2.254/32",
    "192.0.2.254/24",
    "192.0.2.255/16",
    "2001:db8::5/64",
    "2001:db8::fffe/64",
]


def _special_v4() -> st.SearchStrategy[str]:
    nets = ["0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"]
    return st.tuples(st.sampled_from(nets), st.integers(0, 2**24 - 1), st.integers(1, 32)).map(
        lambda t: (
            f"{ipaddress.ip_network(t[0])[t[1] % ipaddress.ip_network(t[0]).num_addresses]}/{t[2]}"
        )
    )


def _special_v6() -> st.SearchStrategy[str]:
    return st.tuples(st.sampled_from(["fe80::/10", "ff00::/8"]), st.integers(0, 2**64)).map(
        lambda t: f"{ipaddress.ip_network(t[0])[t[1]]}/64"
    )


def _good_address(network: str, prefix: st.SearchStrategy[int]) -> st.SearchStrategy[str]:
    """A host address of `network` with a prefix length that keeps it a unicast host
    address of its own prefix (not the network, broadcast or subnet-router address)."""
    net = ipaddress.ip_network(network)

    def make(t: tuple[int, int]) -> str | None:
        ip = net[t[0] % net.num_addresses]
        iface = ipaddress.ip_interface(f"{ip}/{t[1]}")
        host = iface.network
        if iface.ip.version == 4 and t[1] <= 30 and ip in (host[0], host[-1]):
            return None
        if iface.ip.version == 6 and t[1] <= 126 and ip == host[0]:
            return None
        if str(ip) in TAKEN:
            return None
        return str(iface)

    return (
        st.tuples(st.integers(0, 2**32), prefix).map(make).filter(lambda v: v is not None)  # type: ignore[arg-type]
    )


GOOD_ADDRESSES = st.one_of(
    _good_address("198.51.100.0/24", st.integers(1, 32)),
    _good_address("192.0.2.0/24", st.integers(8, 32)),
    _good_address("2001:db8::/32", st.integers(1, 128)),
)


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 8, 60, 60


@dataclass
class Case:
    """A parameters object and the paths it must be refused for (see the module doc)."""

    parameters: Any
    form: set[str] = field(default_factory=set)
    node: set[str] = field(default_factory=set)
    exact: bool = True
    deep: str | None = None  # a path below which the nesting is too deep

    def __repr__(self) -> str:
        """Bounded, without recursion: a case may nest thousands of levels deep."""
        shown = _SHORT.repr(self.parameters)
        return (
            f"Case({shown}, form={sorted(self.form)}, node={sorted(self.node)}, exact={self.exact})"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How hypothesis prints a failing case (its pretty printer recurses otherwise)."""
        printer.text(repr(self))


@st.composite
def addresses(draw: Any, path: str, bad_rate: int) -> tuple[list[Any], set[str], set[str], bool]:
    """An ipAddresses list: (value, form paths, node paths, exact); about `bad_rate` in
    10 addresses are bad."""
    size = draw(st.integers(0, 5))
    values: list[Any] = []
    form: set[str] = set()
    node: set[str] = set()
    seen: set[str] = set()
    good: set[str] = set()  # addresses of values the schema takes in form
    for i in range(size):
        pick = 0 if draw(st.integers(0, 9)) >= bad_rate else draw(st.integers(5, 9))
        where = f"{path}[{i}]"
        if pick == 0:
            value = draw(GOOD_ADDRESSES)
        elif pick <= 6:
            value = draw(
                st.one_of(st.sampled_from(FORM_BAD_ADDRESSES), _special_v4(), _special_v6())
            )
            form.add(where)
        elif pick == 7:
            value = draw(st.sampled_from(OUT_OF_RANGE + NODE_USED))
            node.add(where)
        elif pick == 8:
            value = draw(st.sampled_from([24, None, True, ["198.51.100.7/24"], {"ip": "x"}]))
            form.add(where)
        else:
            value = draw(st.text(max_size=30))
            if not _form_verdict_known(value):
                return values, form, node, False
            form.add(where)
        ip = _ip_of(value)
        fine = where not in form
        if value in values:  # the same text twice: uniqueItems
            form.add(path)
        elif ip is not None and ip in good and fine:  # one address, two prefix lengths
            form.add(where)
        elif ip is not None and ip in seen:  # beside a bad value: the rules may not read it
            form.discard(where)
            node.discard(where)
            return values, form, node, False
        if ip is not None:
            seen.add(ip)
            if fine:
                good.add(ip)
        values.append(value)
    if draw(st.integers(0, 19)) == 0 and values:  # the same text twice: uniqueItems
        values.append(values[0])
        form.add(path)
    if draw(st.integers(0, 29)) == 0:
        values = [f"198.51.100.{i + 1}/24" for i in range(17)]
        form, node = {path}, set()
    return values, form, node, True


def _ip_of(value: object) -> str | None:
    try:
        return str(ipaddress.ip_interface(value).ip) if isinstance(value, str) else None
    except ValueError:
        return None


def _form_verdict_known(text: str) -> bool:
    """Random text is a bad address unless it happens to parse."""
    try:
        ipaddress.ip_interface(text)
    except ValueError:
        return True
    return False


_PARENTED = {"macvlan": ["bridge", "vepa", "private", "passthru"], "ipvlan": ["l2", "l3", "l3s"]}
ALL_KINDS = ["veth", "macvlan", "ipvlan", "dummy", "ipoib", "host-device", "sriov-vf"]


@st.composite
def netdev_case(
    draw: Any,
    kinds: list[str] = ALL_KINDS,
    parent: str | None = None,
    max_depth: int = 3000,
    bad_rate: int = 3,
) -> Case:
    """A {type: netdev, netdev: {...}} config of one of `kinds`, about `bad_rate` in 10
    fields bad. With `parent`, for the fuzz node: macvlan on that allowed parent, and
    node-level verdicts (MTU limits)."""
    on_node = parent is not None
    kind = draw(st.sampled_from(kinds))
    base = "$.netdev"
    netdev: dict[str, Any] = {"kind": kind}
    case = Case({"type": "netdev", "netdev": netdev})

    def bad(chance: int = bad_rate) -> bool:
        return bool(draw(st.integers(0, 9)) < chance)

    if draw(st.booleans()):
        if bad():
            netdev["interfaceName"] = draw(st.one_of(BAD_NAMES, WRONG_TYPES))
            case.form.add(f"{base}.interfaceName")
        else:
            netdev["interfaceName"] = draw(GOOD_NAMES)
    if draw(st.booleans()):
        if bad():
            netdev["mtu"] = draw(st.one_of(BAD_NUMBERS, WRONG_TYPES, NUMBER_STRINGS))
            case.form.add(f"{base}.mtu")
        else:
            netdev["mtu"] = draw(GOOD_MTUS)
            limit = {"macvlan": PARENT_MTU, "host-device": NIC_MAX_MTU}.get(kind)
            if on_node and limit is not None and netdev["mtu"] > limit:
                case.node.add(f"{base}.mtu")
    if kind not in ("ipvlan", "ipoib") and draw(st.booleans()):
        if bad():
            netdev["macAddress"] = draw(st.one_of(BAD_MACS, WRONG_TYPES))
            case.form.add(f"{base}.macAddress")
        else:
            netdev["macAddress"] = draw(GOOD_MACS)
            if kind == "macvlan" and not int(netdev["macAddress"][:2], 16) & 2:
                case.form.add(f"{base}.macAddress")  # a macvlan's must be locally administered
    if draw(st.integers(0, 3)):
        values, form, node, exact = draw(addresses(f"{base}.ipAddresses", bad_rate))
        netdev["ipAddresses"] = values
        case.form |= form
        case.node |= node
        case.exact &= exact
    if kind in _PARENTED or kind == "ipoib":
        netdev["parent"] = parent if parent is not None else draw(GOOD_NAMES)
        modes = _PARENTED.get(kind, ["datagram", "connected"])
        if draw(st.booleans()):
            if bad(min(bad_rate, 2)):
                netdev["mode"] = draw(st.sampled_from(["shared", "", "L2", 1, None, "bridge "]))
                case.form.add(f"{base}.mode")
            else:
                netdev["mode"] = draw(st.sampled_from(modes))
        if bad(1):
            del netdev["parent"]
            case.form.add(base)  # 'parent' is a required property
    if kind == "ipoib" and draw(st.booleans()):
        if bad():
            netdev["pkey"] = draw(st.sampled_from([0, -1, 0x10000, True, 1.5, "0x7fff"]))
            case.form.add(f"{base}.pkey")
        else:
            netdev["pkey"] = draw(st.integers(1, 0xFFFF))
    if kind == "sriov-vf":
        for name, good, wrong in (
            ("vlan", st.integers(0, 4094), st.sampled_from([4095, -1, 1.5, "1", True])),
            ("vfIndex", st.integers(0, 63), st.sampled_from([-1, 0.5, "0", True])),
            ("trust", st.booleans(), st.sampled_from([0, 1, "true", None])),
            ("spoofchk", st.booleans(), st.sampled_from([0, "false", []])),
        ):
            if draw(st.booleans()):
                if bad():
                    netdev[name] = draw(wrong)
                    case.form.add(f"{base}.{name}")
                else:
                    netdev[name] = draw(good)
    if draw(st.integers(0, 9)) == 0:
        key = draw(st.sampled_from(["bogus", "MTU", "ipAddress", "interface_name", "__proto__"]))
        netdev[key] = draw(st.one_of(st.none(), st.integers(), st.text(max_size=5)))
        case.form.add(f"{base}.{key}")
    roll = _mutate(draw, case, max_depth)
    if roll in (0, 2, 3) or netdev.get("kind") not in ALL_KINDS:
        return case  # too deep, or no longer validated as a netdev object of a known kind
    # docs/configuration.md: an IPv6 address needs an mtu >= 1280; the node checks it (the MTU
    # may be inherited), so a valid mtu below it is the node's verdict, not the schema's.
    mtu, ips = netdev.get("mtu"), netdev.get("ipAddresses")
    valid_mtu = isinstance(mtu, int) and not isinstance(mtu, bool) and 68 <= mtu < 1280
    if valid_mtu and isinstance(ips, list):
        case.node |= {f"{base}.ipAddresses[{i}]" for i, v in enumerate(ips) if ":" in str(v)}
    return case


def _mutate(draw: Any, case: Case, max_depth: int) -> int:
    """Sometimes wreck the case: junk anywhere, a deep nesting, a wrong top level.
    Returns which (0-3; above: nothing done)."""
    roll = draw(st.integers(0, 19))
    netdev = case.parameters["netdev"]
    if roll == 0:  # deep nesting under an unknown key
        depth = draw(st.sampled_from([d for d in (17, 40, 400, 3000) if d <= max_depth]))
        value: Any = "x"
        for _ in range(depth):
            value = {"x": value} if draw(st.booleans()) else [value]
        netdev["nest"] = value
        case.form, case.node, case.exact, case.deep = set(), set(), False, "$.netdev"
    elif roll == 1:  # junk in one field: what was known about it (or, for kind, all) is not
        name = draw(st.sampled_from(["mtu", "ipAddresses", "kind", "macAddress"]))
        netdev[name] = draw(JSON)
        keep = (
            (lambda p: False)
            if name == "kind"
            else (lambda p: not p.startswith(f"$.netdev.{name}"))
        )
        case.form = {p for p in case.form if keep(p)}
        case.node = {p for p in case.node if keep(p)}
        case.exact = False
    elif roll == 2:
        case.parameters["type"] = draw(st.one_of(st.sampled_from(["tap", "", "NETDEV", 1]), JSON))
        case.form, case.node, case.exact = set(), set(), False
    elif roll == 3:
        case.parameters = draw(st.one_of(JSON, st.just({"type": "netdev", "netdev": "veth"})))
        case.form, case.node, case.exact = set(), set(), False
    return roll


JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
