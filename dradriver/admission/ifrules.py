"""The `interfaceRules` keyword (dradriver.contract.ifrules) in CEL: what an interface's
values say of each other, refused at admission as the schema refuses it.

Two halves, because a config is a fragment of what the driver merges:

* `alone`: what one config's own values decide (one address with two prefix lengths,
  a gateway of the other family, a default route at the pod network's metric, two
  routes to one destination at one metric, a sysctl of an interface no claim can have,
  a sysctl value the kernel does not take); each list is replaced as a whole by a
  later config, and each sysctl value stands alone;
* `merged`: what only the merge of a request's configs decides (a gateway against the
  addresses, a sysctl against the interface's name, IPv6 turned off beside an IPv6
  address), read from the values that win.

A value the schema refuses in form takes no part, as in dradriver.contract.ifrules. Each
list is bounded by the schema's maxItems (maxProperties) before it is iterated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.admission.cel import (
    is_last,
    key_path,
    lit,
    show_string,
)
from dradriver.contract import ifrules

KEYWORD = ifrules.KEYWORD
INT32_PATTERN = "^-?0*[0-9]{1,10}$"  # then int() fits: 10 digits at most after the zeros
CONF_PREFIX = len("net.ipv4.conf.")


def bounds(properties: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(addresses, routes, sysctls) at most, from the schema; None if one is unbounded."""
    try:
        return (
            int(properties["ipAddresses"]["maxItems"]),
            int(properties["routes"]["maxItems"]),
            int(properties["sysctls"]["maxProperties"]),
        )
    except (KeyError, TypeError):
        return None


def default_name(properties: Mapping[str, Any]) -> str | None:
    """The interface name a config without `interfaceName` gets."""
    value = (properties.get("interfaceName") or {}).get("default")
    return value if isinstance(value, str) else None


def address_ok(x: str) -> str:
    """CEL: whether `x` is an address with a prefix length written canonically
    (ifrules.usable_interface)."""
    return f"(type({x}) == string && size({x}) <= 43 && isCIDR({x}) && string(cidr({x})) == {x})"


def route_ok(x: str) -> str:
    """CEL: whether route `x` is one the rules read (ifrules.usable_route)."""
    d, g, m = f"{x}['destination']", f"{x}['gateway']", f"{x}['metric']"
    return (
        f"(type({x}) == map && 'destination' in {x} && {address_ok(d)} && "
        f"(!('gateway' in {x}) || type({g}) == string && size({g}) <= 39 && isIP({g}) && "
        f"string(ip({g})) == {g}) && "
        f"(!('metric' in {x}) || type({m}) == int && {m} >= 0 && {m} <= 4294967295))"
    )


def kernel_metric(x: str) -> str:
    """CEL: the metric the kernel gives route `x` (PodRoute.kernel_metric)."""
    m = f"{x}['metric']"
    return (
        f"({x}['destination'].contains(':') ? ('metric' in {x} && {m} != 0 ? {m} : 1024) : "
        f"('metric' in {x} ? {m} : 0))"
    )


def int32_ok(v: str) -> str:
    """CEL: whether sysctl value `v` is a 32-bit integer the kernel takes (ifrules.int32)."""
    fits = "{n} >= -2147483648 && {n} <= 2147483647"
    return (
        f"(type({v}) == int ? {fits.format(n=v)} : type({v}) == string && "
        f"{v}.matches({lit(INT32_PATTERN)}) && {fits.format(n=f'int({v})')})"
    )


def _sysctl_usable(k: str) -> str:
    """CEL: whether key `k` has a per-interface sysctl's shape enough to name its
    interface (a key the schema refuses is refused at the same path anyway)."""
    return (
        f"(size({k}) <= {ifrules.SYSCTL_NAME_MAX} && ({k}.startsWith('net.ipv4.conf.') || "
        f"{k}.startsWith('net.ipv6.conf.')) && {k}.lastIndexOf('.') > {CONF_PREFIX})"
    )


def _ifname(k: str) -> str:
    return f"{k}.substring({CONF_PREFIX}, {k}.lastIndexOf('.'))"


def alone(v: str, schema: Mapping[str, Any], path: str) -> str:
    """CEL list(string): what the values of interface object `v` (a map) decide alone."""
    limits = bounds(schema.get("properties") or {})
    if limits is None:
        return "[]"
    n_ips, n_routes, n_sysctls = limits
    a, rs, s = f"{v}['ipAddresses']", f"{v}['routes']", f"{v}['sysctls']"
    addresses = (
        f"'ipAddresses' in {v} && type({a}) == list && size({a}) <= {n_ips} ? "
        f"[{a}.map(x, {address_ok('x')} ? string(cidr(x).ip()) : '')]"
        f".map(ips, {a}.transformList(i, x, ips[i] != '' ? "
        "[ips.indexOf(ips[i])].map(j, "
        f"j < i && {a}[j] != x ? {path} + '.ipAddresses[' + string(i) + ']: ' + "
        "ips[i] + ' is ipAddresses[' + string(j) + '] already, with another prefix length'"
        " : '')[0] : '').filter(m, m != ''))[0] : []"
    )
    default_metric = (
        f"x['destination'] in {lit(list(ifrules.DEFAULT_ROUTES))} && "
        f"{kernel_metric('x')} in {lit(list(ifrules.POD_DEFAULT_METRICS))}"
    )
    at = f"{path} + '.routes[' + string(i) + ']"
    clash = (
        f"{default_metric} ? {at}.metric: ' + "
        + lit(
            "a default route needs a metric other than 0 and 1024: the pod's own network "
            "holds the default route at metric 0 (IPv4) or 1024 (IPv6), and the kernel keeps "
            "one route per destination and metric"
        )
        + " : [ks.indexOf(ks[i])].map(j, j == i ? '' : "
        f"{at}: routes[' + string(j) + '] already goes to ' + x['destination'] + "
        f"' at metric ' + string({kernel_metric('x')}) + "
        + lit(
            ": the kernel keeps one route per destination and metric; give one of them "
            "another metric"
        )
        + ")[0]"
    )
    family = (
        "'gateway' in x && x['destination'].contains(':') != x['gateway'].contains(':') ? "
        f"{at}.gateway: ' + x['gateway'] + ' is not of the family of the destination ' + "
        "x['destination'] : ''"
    )
    routes = (
        f"'routes' in {v} && type({rs}) == list && size({rs}) <= {n_routes} ? "
        f"[{rs}.map(x, {route_ok('x')} ? x['destination'] + ' ' + string({kernel_metric('x')})"
        " : '')]"
        f".map(ks, {rs}.transformList(i, x, ks[i] != '' ? "
        f"[({clash}), ({family})].filter(m, m != '').join('; ') : '')"
        ".filter(m, m != ''))[0] : []"
    )
    where = f"{path} + '.sysctls' + {key_path('k')}"
    sysctls = (
        f"'sysctls' in {v} && type({s}) == map && size({s}) <= {n_sysctls} ? "
        f"{s}.filter(k, {_sysctl_usable('k')}).map(k, "
        f"[{_ifname('k')} in {lit(list(ifrules.NO_CLAIM_INTERFACE))} ? {where} + "
        f"': names interface ' + {_ifname('k')} + \", which is no claim's interface\" : '', "
        f"k.substring(k.lastIndexOf('.') + 1) in {lit(sorted(ifrules.STRING_SYSCTLS))} || "
        f"{int32_ok(f'{s}[k]')} || !(type({s}[k]) == string || type({s}[k]) == int) ? '' : "
        f"{where} + ': ' + {show_string(f'string({s}[k])')} + "
        "' is not a number the kernel takes (32-bit integer)']"
        ".filter(m, m != '').join('; ')).filter(m, m != '')"
        " : []"
    )
    return f"({addresses}) + ({routes}) + ({sysctls})"


def merged(
    fs: str,
    name: str,
    kind: str,
    properties: Mapping[str, Any],
    reach_kinds: list[str],
    context: str,
) -> str:
    """CEL list(string): what the merge of fragments `fs` (a list of {path, p}, in merge
    order, each with a map at p[name]) decides for type `name`, its kind CEL `kind`
    ('' when no config names one); `context` (CEL string) ends each message."""
    limits = bounds(properties)
    if limits is None:
        return "[]"
    n_ips, n_routes, n_sysctls = limits
    dot = lit("." + name)
    t = f"c.p[{lit(name)}]"

    def winner(field: str) -> str:
        """CEL: the fragments that set `field`, the last (the one that wins) alone."""
        return (
            f"[{fs}.filter(c, {lit(field)} in {t})].map(w, size(w) == 0 ? [] : [w[size(w) - 1]])[0]"
        )

    default = default_name(properties)
    name_of = (
        f"[{winner('interfaceName')}].map(w, size(w) == 0 ? {lit(default or '')} : "
        f"w[0].p[{lit(name)}]['interfaceName'])[0]"
    )
    addresses = (
        f"[{winner('ipAddresses')}].map(w, size(w) == 0 ? [] : "
        f"[w[0].p[{lit(name)}]['ipAddresses']].map(l, type(l) == list && size(l) <= {n_ips} "
        "? l : [])[0])[0]"
    )
    # Bound: N (the name), A (every address, as written), okA (those the rules read).
    g = "x['gateway']"
    gw = f"ip({g})"
    at = f"rc.path + {dot} + '.routes[' + string(i) + '].gateway: ' + {g}"
    edge = (
        f"okA.filter(a, !{g}.contains(':') && cidr(a).ip().family() == 4 && "
        f"cidr(a).prefixLength() <= 30 && (cidr(a).masked().ip() == {gw} || "
        f"cidr(a).containsIP({gw}) && {is_last(g, 'cidr(a).prefixLength()')}))"
    )
    unreachable = (
        f"kind in {lit(reach_kinds)} && !({g}.contains(':') && {gw}.isLinkLocalUnicast()) && "
        f"!okA.exists(a, cidr(a).containsIP({gw}))"
    )
    gateway = (
        f"okA.exists(a, cidr(a).ip() == {gw}) ? {at} + \" is this interface's own address, "
        'not a gateway" : '
        f"[{edge}].map(e, size(e) > 0 ? {at} + ' is the ' + "
        f"(cidr(e[0]).masked().ip() == {gw} ? 'network' : 'broadcast') + ' address of ' + "
        "string(cidr(e[0]).masked()) + ', not a gateway' : "
        f'{unreachable} ? {at} + " is not on a network of the interface\'s addresses (" + '
        "(size(okA) == 0 ? 'none' : okA.map(a, string(cidr(a).masked())).join(', ')) + ')' "
        ": '')[0]"
    )
    rl = f"rc.p[{lit(name)}]['routes']"
    routes = (
        f"{winner('routes')}.map(rc, type({rl}) == list && size({rl}) <= {n_routes} ? "
        f"{rl}.transformList(i, x, {route_ok('x')} && 'gateway' in x && "
        f"x['destination'].contains(':') == {g}.contains(':'), {gateway})"
        f".filter(m, m != '').map(m, m + {context}).join('; ') : '')"
    )
    sl = f"c.p[{lit(name)}]['sysctls']"
    where = f"c.path + {dot} + '.sysctls' + {key_path('k')}"
    others = (
        f"{fs}.filter(c, 'sysctls' in {t} && type({sl}) == map && size({sl}) <= {n_sysctls})"
        f".map(c, {sl}.filter(k, {_sysctl_usable('k')} && "
        f"!({_ifname('k')} in {lit(list(ifrules.NO_CLAIM_INTERFACE))}) && {_ifname('k')} != N)"
        f".map(k, {where} + ': names interface ' + {_ifname('k')} + \", not this claim's \" + N"
        f" + {context}).join('; '))"
    )
    disable = "('net.ipv6.conf.' + N + '.disable_ipv6')"
    v6 = f"A.transformList(m, x, {address_ok('x')} && x.contains(':'), m)"
    off = (
        f"[{fs}.filter(c, 'sysctls' in {t} && type({sl}) == map && {disable} in {sl})]"
        f".map(w, size(w) == 0 || !({_sysctl_usable(disable)}) || N in "
        f"{lit(list(ifrules.NO_CLAIM_INTERFACE))} ? [] : "
        f"[w[size(w) - 1]].map(c, [{sl}[{disable}]].map(v, {int32_ok('v')} && "
        f"(type(v) == int ? v != 0 : int(v) != 0) ? [{v6}].map(v6, size(v6) == 0 ? [] : "
        f"[c.path + {dot} + '.sysctls' + {key_path(disable)} + "
        "': turns IPv6 off, but ipAddresses[' + string(v6[0]) + '] is an IPv6 address' + "
        f"{context}])[0] : [])[0])[0])[0]"
    )
    body = f"({routes}) + (type(N) == string && N != '' ? ({others}) + ({off}) : [])"
    return (
        f"[{name_of}].map(N, [{addresses}].map(A, [A.filter(x, {address_ok('x')})].map(okA, "
        f"[{kind}].map(kind, ({body}).filter(m, m != ''))[0])[0])[0])[0]"
    )
